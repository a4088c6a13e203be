#!/usr/bin/env python3
"""Runs a command with a small, nearly full file system at MNT, then checks
an npy output folder in it.

Usage: full_disk_run.py SIZE_KIB MNT CHECKDIR -- CMD [ARGS...]
MNT becomes a tmpfs of SIZE_KIB KiB (in a private mount namespace through
`unshare -rm`, so it needs no root and vanishes afterwards); CMD runs with
it mounted, and CHECKDIR ("-" for none) is then summarized by
npy_dir_check. Where no mount namespace can be had (containers without
user namespaces), the fallback is a file-size limit (RLIMIT_FSIZE) of
SIZE_KIB / 3 on every file the command writes (a third, so that an output
or cache that would not fit in the tmpfs crosses it), which fails writes
with EFBIG ("File too large") instead of ENOSPC; stderr names the mode.
Prints "exit N", the command's stderr and stdout, the number of files left
under MNT, then the check.
"""
import os
import resource
import shutil
import signal
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import npy_dir_check  # noqa: E402


def run_and_report(cmd, mnt, check, preexec=None):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          preexec_fn=preexec, timeout=300)
    print("exit %d" % proc.returncode)
    sys.stdout.write(proc.stderr.decode("utf-8", "replace"))
    sys.stdout.write(proc.stdout.decode("utf-8", "replace"))
    left = sum(len(files) for _, _, files in os.walk(mnt))
    print("files left in the small file system: %d" % left)
    if check != "-":
        print("\n".join(npy_dir_check.check(check)))
    sys.stdout.flush()


def main():
    args = sys.argv[1:]
    if args[0] == "--inside":
        # In the private mount namespace: mount, run, check.
        size, mnt, check = args[1:4]
        subprocess.check_call(["mount", "-t", "tmpfs", "-o", "size=%sk" % size,
                               "tmpfs", mnt])
        run_and_report(args[5:], mnt, check)
        return
    size, mnt, check = args[0:3]
    assert args[3] == "--"
    cmd = args[4:]
    os.makedirs(mnt, exist_ok=True)
    unshare = None if os.environ.get("FULL_DISK_NO_UNSHARE") else shutil.which("unshare")
    if unshare:
        probe = subprocess.run([unshare, "-rm", "true"], stderr=subprocess.DEVNULL)
        if probe.returncode == 0:
            sys.stderr.write("full_disk_run: tmpfs of %s KiB\n" % size)
            sys.stdout.flush()
            rc = subprocess.call([unshare, "-rm", sys.executable, os.path.abspath(__file__),
                                  "--inside", size, mnt, check, "--"] + cmd)
            sys.exit(rc)
    sys.stderr.write("full_disk_run: no mount namespace; RLIMIT_FSIZE of %s KiB\n" % size)

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        n = int(size) * 1024 // 3
        resource.setrlimit(resource.RLIMIT_FSIZE, (n, n))
    run_and_report(cmd, mnt, check, limit)


main()
