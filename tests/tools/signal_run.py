#!/usr/bin/env python3
"""Starts a command, sends it a signal once it is under way, and reports how
it ended.

Usage: signal_run.py [--fifo PATH] SIGNAL DIR NFILES -- CMD [ARGS...]
Waits until DIR holds at least NFILES .npy files (NFILES 0: waits 1 s after
the start), sends SIGNAL (INT or TERM) to the command's pid, and prints its
exit code, whether it ended within 1 s of the signal, and npy_dir_check's
summary of DIR. The command's stdout/stderr are printed after that.
With --fifo, PATH is made a named pipe that gets one line and then stays
open without more data: a reader of it blocks, like a stalled network file.
"""
import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import npy_dir_check  # noqa: E402

args = sys.argv[1:]
if args[0] == "--fifo":
    fifo = args[1]
    args = args[2:]
    if os.path.exists(fifo):
        os.unlink(fifo)
    os.mkfifo(fifo)
    held = []

    def feed():
        f = open(fifo, "w")  # blocks until the reader opens it
        f.write("one line\n")
        f.flush()
        held.append(f)  # stays open: the reader waits for more

    threading.Thread(target=feed, daemon=True).start()
sys.argv = [sys.argv[0]] + args
sig = getattr(signal, "SIG" + sys.argv[1])
d = sys.argv[2]
nfiles = int(sys.argv[3])
assert sys.argv[4] == "--"
cmd = sys.argv[5:]
proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
start = time.monotonic()
while True:
    if proc.poll() is not None:
        print("ended before the signal, exit %d" % proc.returncode)
        break
    if nfiles == 0:
        ready = time.monotonic() - start >= 1.0
    else:
        ready = os.path.isdir(d) and sum(n.endswith(".npy") for n in os.listdir(d)) >= nfiles
    if ready:
        break
    if time.monotonic() - start > 60:
        print("timed out waiting for %d files" % nfiles)
        break
    time.sleep(0.01)
sent = time.monotonic()
if proc.poll() is None:
    proc.send_signal(sig)
try:
    out, err = proc.communicate(timeout=30)
except subprocess.TimeoutExpired:
    proc.kill()
    out, err = proc.communicate()
    print("did not stop within 30 s")
took = time.monotonic() - sent
print("exit %d" % proc.returncode)
print("stopped within 3 s: %s (%.2f s)" % ("yes" if took < 3.0 else "no", took))
print("\n".join(npy_dir_check.check(d)))
sys.stdout.write(err.decode("utf-8", "replace"))
sys.stdout.write(out.decode("utf-8", "replace"))
