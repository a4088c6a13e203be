#!/usr/bin/env python3
"""Runs a command as an unprivileged user, so that file permissions apply.

Usage: as_unprivileged.py CMD [ARGS...]. The test suite often runs as root,
for whom mode 000 does not stop reads; then the command runs as nobody
(setpriv, util-linux) with no supplementary groups. As any other user it
just runs. Exits with the command's code.
"""
import os
import shutil
import subprocess
import sys

cmd = sys.argv[1:]
if os.geteuid() == 0:
    setpriv = shutil.which("setpriv")
    if not setpriv:
        sys.exit("as_unprivileged: running as root and no setpriv to drop privileges")
    cmd = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd
sys.exit(subprocess.call(cmd))
