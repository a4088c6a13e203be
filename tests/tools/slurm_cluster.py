"""A one-node Slurm cluster on 127.0.0.1 for tests: munged, slurmctld and
slurmd (Debian's munge, slurmctld, slurmd, slurm-client) started in the
foreground with every file under one temporary folder (key, sockets, state,
spool, logs) and ports chosen free, so it runs beside another one and
touches nothing of the host's. Runs as root (the test machines' user) or
as any user (then SlurmUser is that user).

    with SlurmCluster(tmpdir) as c:
        subprocess.run(["srun", "-n1", "hostname"], env=c.env)

Usage as a script (for trying recipes by hand): slurm_cluster.py DIR
[NODES] starts it, prints `export SLURM_CONF=...`, and waits for Ctrl-C."""
import getpass
import os
import shutil
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def available():
    """Why a cluster cannot start here, or None."""
    for tool in ["munged", "slurmctld", "slurmd", "srun", "sinfo"]:
        if not shutil.which(tool) and not os.path.exists("/usr/sbin/" + tool):
            return "%s is not installed (scripts/setup installs munge, " \
                   "slurmctld, slurmd and slurm-client)" % tool
    return None


def _exe(name):
    return shutil.which(name) or "/usr/sbin/" + name


class SlurmCluster:
    """`nodes` > 1: that many nodes, each a slurmd of its own (`slurmd -N
    NAME`, its own port, spool and log), node i at 127.0.0.(i+1): Slurm
    places the components of a heterogeneous job on distinct nodes, and a
    worker listening on its node's address is then found by the trainer
    from Slurm's node list alone."""

    def __init__(self, root, cpus=4, nodes=1):
        self.root = str(root)
        # More CPUs than the host may have (config_overrides).
        self.cpus = cpus
        self.nodes = nodes
        self.procs = []
        self.env = None

    def _write_conf(self):
        d = self.root
        user = getpass.getuser()
        self.conf = os.path.join(d, "slurm.conf")
        host = socket.gethostname()
        if self.nodes == 1:
            self.node_names = [host]
            node_lines = "NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} " \
                "State=UNKNOWN\n".format(host=host, cpus=self.cpus)
            per_node = ""
        else:
            self.node_names = ["sluice%d" % i for i in range(self.nodes)]
            node_lines = "".join(
                "NodeName={n} NodeHostname={host} NodeAddr=127.0.0.{a} "
                "Port={port} CPUs={cpus} State=UNKNOWN\n".format(
                    n=n, host=host, a=i + 1, port=free_port(), cpus=self.cpus)
                for i, n in enumerate(self.node_names))
            per_node = "-%n"
        with open(self.conf, "w") as f:
            f.write("""\
ClusterName=sluicetest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
SlurmdPort={slurmd}
SrunPortRange={srun_lo}-{srun_hi}
SlurmUser={user}
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={d}/munge.socket
CredType=cred/munge
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool{per_node}
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd{per_node}.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd{per_node}.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
{node_lines}\
PartitionName=debug Nodes={nodes} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
""".format(host=host, ctld=free_port(), slurmd=free_port(),
           srun_lo=40000 + os.getpid() % 10000,
           srun_hi=40000 + os.getpid() % 10000 + 200,
           user=user, d=d, node_lines=node_lines, per_node=per_node,
           nodes=",".join(self.node_names)))
        with open(os.path.join(d, "cgroup.conf"), "w") as f:
            f.write("CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n")

    def __enter__(self):
        d = self.root
        for sub in ["state", "spool"]:
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        for n in range(self.nodes):
            os.makedirs(os.path.join(d, "spool-sluice%d" % n), exist_ok=True)
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        os.chmod(d, 0o700)
        self._write_conf()
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        log = open(os.path.join(d, "daemons.log"), "ab")
        self.procs.append(subprocess.Popen(
            [_exe("munged"), "--foreground", "--force",
             "--key-file=" + key, "--socket=" + d + "/munge.socket",
             "--pid-file=" + d + "/munged.pid",
             "--log-file=" + d + "/munged.log",
             "--seed-file=" + d + "/munged.seed"],
            stdout=log, stderr=log))
        self._wait(lambda: os.path.exists(d + "/munge.socket"), "munged")
        self.procs.append(subprocess.Popen(
            [_exe("slurmctld"), "-D", "-i", "-f", self.conf],
            stdout=log, stderr=log, env=self.env))
        for n in (self.node_names if self.nodes > 1 else [None]):
            self.procs.append(subprocess.Popen(
                [_exe("slurmd"), "-D", "-f", self.conf] +
                (["-N", n] if n else []),
                stdout=log, stderr=log, env=self.env))
        self._wait(self._idle, "the node to be idle")
        return self

    def _idle(self):
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], env=self.env,
                           capture_output=True, text=True)
        states = r.stdout.split()
        return r.returncode == 0 and len(states) == self.nodes and all(
            s in ("idle", "mixed") for s in states)

    def _wait(self, ok, what, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError("a Slurm daemon exited (%d) waiting "
                                       "for %s; see %s" % (
                                           p.returncode, what, self.root))
            if ok():
                return
            time.sleep(0.2)
        raise RuntimeError("timed out waiting for %s; see %s/*.log" % (
            what, self.root))

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


if __name__ == "__main__":
    why = available()
    if why:
        sys.exit(why)
    os.makedirs(sys.argv[1], exist_ok=True)
    nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    with SlurmCluster(os.path.abspath(sys.argv[1]), nodes=nodes) as c:
        print("export SLURM_CONF=%s" % c.conf, flush=True)
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
