"""Trainers fed by ``sluice serve`` workers on other hosts (docs/distributed.md).

    # on each CPU node:   sluice serve spec.yaml --listen 10.0.0.5:7070
    ds = sluice.remote.Dataset("spec.yaml", workers=["10.0.0.5:7070", ...])
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    for epoch in range(10):
        ds.set_epoch(epoch)
        for batch in loader:
            ...

The same interface as ``sluice.torch.Dataset``: one epoch of this rank's
share per iteration, ``set_epoch``, ``state_dict``/``load_state_dict``,
``rank``/``world_size``. The batches are byte-identical to those a local
``sluice.torch.Dataset`` of the same spec gives at the same rank, in the same
order, whatever the number of workers and whatever happens to them (killed,
added): each batch is a numbered run of source positions, which any worker
can compute, and the client keeps them in order and exactly once. A state
saved here resumes a local Dataset of the same spec and vice versa.
Numeric fields are tensors over the received bytes (no copy after receipt).
"""
import json
import os
from typing import Any, Dict, Iterator, List, Optional

from ._remote import Client

__all__ = ["Dataset", "slurm_workers"]


def slurm_workers(port: int, het_group: Optional[int] = None,
                  tasks_per_node: int = 1) -> List[str]:
    """The workers of this Slurm job: "addr:port" for each node of the job
    (or of heterogeneous component ``het_group``), ports port ..
    port + tasks_per_node - 1 on each, the node's address as slurmctld knows
    it (NodeAddr), else its name. Use it in the trainer step of a job whose
    other component runs ``sluice serve --listen ADDR:PORT`` (docs/
    distributed.md, "Slurm")."""
    import subprocess
    var = ("SLURM_JOB_NODELIST" if het_group is None
           else "SLURM_JOB_NODELIST_HET_GROUP_%d" % het_group)
    nodelist = os.environ.get(var)
    if not nodelist:
        raise ValueError("$%s is not set: slurm_workers() runs inside a "
                         "Slurm job%s" % (var, "" if het_group is None else
                                          " with heterogeneous components"))
    hosts = subprocess.run(["scontrol", "show", "hostnames", nodelist],
                           check=True, capture_output=True,
                           text=True).stdout.split()
    out = []
    for h in hosts:
        info = subprocess.run(["scontrol", "show", "node", "-o", h],
                              capture_output=True, text=True).stdout
        addr = h
        for item in info.split():
            if item.startswith("NodeAddr="):
                addr = item.split("=", 1)[1] or h
        out += ["%s:%d" % (addr, port + i) for i in range(tasks_per_node)]
    return out


def _spec_distributed(spec_path: str) -> Dict[str, Any]:
    try:
        import yaml
        with open(spec_path) as f:
            doc = yaml.safe_load(f)
        d = doc.get("distributed") if isinstance(doc, dict) else None
        return d if isinstance(d, dict) else {}
    except Exception:  # the workers check the spec; this is only a default
        return {}


def _resolve(arg: Optional[int], spec: Dict[str, Any], key: str, env: str,
             default: int) -> int:
    if arg is not None:
        return int(arg)
    if key in spec:
        return int(spec[key])
    if os.environ.get(env):
        return int(os.environ[env])
    return default


try:
    from torch.utils.data import IterableDataset as _Base
except ImportError:  # numpy-only trainers use Dataset.arrays()
    _Base = object


class Dataset(_Base):
    """One epoch of this rank's share per iteration, from remote workers.

    spec_path: the spec the workers serve (its text must be the workers').
    workers: ["host:port", ...]; workers_file: a file of such lines,
        re-read while an epoch runs (a line added is a worker added). An
        entry "dns:///NAME:PORT" (or "dns://DNS-SERVER[:PORT]/NAME:PORT")
        stands for every address NAME has (a headless Service), resolved
        again every ``dns_interval`` seconds: an address that appears is a
        worker added.
    rank, world_size: this trainer's share, resolved as sluice.Pipeline
        does (argument, the spec's ``distributed:``, $RANK/$WORLD_SIZE,
        else 0 of 1).
    token: the workers' shared token (default: $SLUICE_TOKEN).
    tls_roots: TLS: a PEM file of the roots to trust ("" for the system's;
        None: plaintext); tls_server_name overrides the name checked.
    chunk: batches handed to a worker at a time; None (the default):
        2, and 1 once a batch's numeric fields are known to take 16 MiB or
        more in shared memory (a worker on this host then writes its
        batches into fewer distinct slots; $SLUICE_NO_PER_OUTPUT_CHUNKS=1:
        2 whatever the size). window: batches the client may hold ahead of
        the next one (bounds its memory).
    worker_timeout: seconds with no worker delivering before an error.
    pin_memory: as in sluice.torch.Dataset.
    shared_memory: a worker on this host writes the batches' numeric
        fields into memory this process lends it (a memfd per batch,
        reused), which become the arrays without a copy; only headers
        cross the socket. Workers on other hosts are not affected. False
        (or $SLUICE_NO_SHARED_MEMORY=1): everything over the socket.
    chunk_runs: each worker takes runs of consecutive chunks, so that it
        continues its pipeline from one chunk to the next with any number
        of workers (a run is as long as the window lets every worker's be
        read at once; a worker with none left takes half of another's).
        False (or $SLUICE_NO_CHUNK_RUNS=1): chunks in turn to whichever
        worker asks. The batches are the same either way.
    """

    def __init__(self, spec_path: str, workers: Optional[List[str]] = None,
                 *, workers_file: str = "", rank: Optional[int] = None,
                 world_size: Optional[int] = None,
                 token: Optional[str] = None, tls_roots: Optional[str] = None,
                 tls_server_name: str = "", chunk: Optional[int] = None,
                 window: int = 8, worker_timeout: float = 60.0,
                 epoch: int = 0, pin_memory: bool = False,
                 trainer: Optional[str] = None,
                 dns_interval: float = 5.0,
                 shared_memory: bool = True,
                 chunk_runs: bool = True) -> None:
        super().__init__()
        spec = _spec_distributed(spec_path)
        self.world_size = _resolve(world_size, spec, "world_size",
                                   "WORLD_SIZE", 1)
        self.rank = _resolve(rank, spec, "rank", "RANK", 0)
        if not 0 <= self.rank < self.world_size:
            raise ValueError("rank %d is out of range for world size %d"
                             % (self.rank, self.world_size))
        if token is None:
            token = os.environ.get("SLUICE_TOKEN", "")
        self.spec_path = spec_path
        self.epoch = epoch
        self.pin_memory = pin_memory
        self._client = Client(
            spec_path, list(workers or []), workers_file, self.rank,
            self.world_size, token, tls_roots, tls_server_name,
            0 if chunk is None else chunk, window, worker_timeout,
            trainer or "rank%d@%s" % (self.rank, os.uname().nodename),
            dns_interval, shared_memory, chunk_runs)
        self._resume: Optional[Dict[str, Any]] = None
        self._active = False

    @property
    def epochs(self) -> int:
        """Epochs the spec runs."""
        return self._client.epochs

    def set_epoch(self, epoch: int) -> None:
        if epoch < 0:
            raise ValueError("epoch must be >= 0")
        self.epoch = epoch

    def add_worker(self, address: str) -> None:
        """Adds a worker; it takes a share of the rest of the epoch."""
        self._client.add_worker(address)

    def stats(self) -> Dict[str, float]:
        """Outputs, bytes received (wire_bytes: over the socket;
        shared_memory_outputs: outputs a worker on this host wrote into
        this process's memory; slots_made: the shared-memory slots this
        trainer made, slot_waits: the times it waited for one to be freed
        instead, slots_huge: the slots made of huge pages, where the
        host's transparent_hugepage/shmem_enabled allows them or the
        kernel collapses them), chunks, runs (chunks a worker started a
        pipeline for: not the one after its previous chunk), steals (runs
        taken from another worker), reassigned outputs, failures;
        and what advice() is made of: the workers' CPU for the delivered
        outputs, this process's CPU receiving them, the time the trainer
        waited for batches and the time it spent between them."""
        return self._client.stats()

    def advice(self, cores_per_worker: Optional[int] = None
               ) -> Dict[str, Any]:
        """How many workers this trainer needs, from what it measured so
        far (read some batches first, at the trainer's real pace):

        - demand: the batches/s the trainer would take if it never waited
          (1 / its own seconds per batch between next() calls);
        - worker_cpu_per_batch: CPU seconds a worker spends per batch
          (its pipeline and the encoding, as the workers report them);
        - worker_cores: demand x worker_cpu_per_batch, the cores that keep
          the trainer fed; workers: that over cores_per_worker (default:
          the threads the workers run), rounded up;
        - receive_cores: this process's cores that receiving takes at the
          demand (the trainer's local share of the work);
        - stall: the fraction of the trainer's time spent waiting.
        "report" says the same in a sentence. The model is Pecan's
        AutoPlacement reduced to one trainer: workers scale out until the
        trainer's own step (or its receiving) is the bottleneck."""
        import math
        s = self._client.stats()
        n = s["outputs"]
        if n < 2 or s["trainer_seconds"] <= 0:
            raise ValueError("advice() needs a few batches read at the "
                             "trainer's own pace first (%d so far)" % n)
        step = s["trainer_seconds"] / max(1, n - 1)
        demand = 1.0 / step
        cpu = s["worker_cpu_seconds"] / n
        cores = cores_per_worker or s["worker_threads"] or 1
        worker_cores = demand * cpu
        workers = max(1, math.ceil(worker_cores / cores - 1e-9))
        receive = s["receive_cpu_seconds"] / n * demand
        busy = s["trainer_seconds"] + s["wait_seconds"]
        stall = s["wait_seconds"] / busy if busy > 0 else 0.0
        report = ("the trainer takes %.1f batches/s when fed (%.1f ms of its "
                  "own per batch) and waited %.0f%% of the time; a worker "
                  "spends %.1f ms of CPU per batch, so %.1f worker cores "
                  "keep it fed: %d worker%s of %d cores; receiving takes "
                  "%.2f of the trainer's cores" % (
                      demand, 1e3 * step, 100 * stall, 1e3 * cpu,
                      worker_cores, workers, "" if workers == 1 else "s",
                      cores, receive))
        return {"demand": demand, "trainer_seconds_per_batch": step,
                "worker_cpu_per_batch": cpu, "worker_cores": worker_cores,
                "cores_per_worker": cores, "workers": workers,
                "receive_cores": receive, "stall": stall, "report": report}

    def state_dict(self) -> Dict[str, Any]:
        """Where the current epoch stands: the same dict a local
        sluice.torch.Dataset gives after the same batches."""
        if self._active:
            return {"epoch": self.epoch,
                    "pipeline": json.loads(self._client.state())}
        return {"epoch": self.epoch, "pipeline": self._resume}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self._resume = state.get("pipeline")

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        resume = json.dumps(self._resume) if self._resume else ""
        self._resume = None
        self._client.start(self.epoch, resume)
        self._active = True
        import torch
        pinning = self.pin_memory and torch.cuda.is_available()
        try:
            while True:
                batch = self._client.next()
                if batch is None:
                    break
                out: Dict[str, Any] = {}
                for name, arr in batch.items():
                    if arr.dtype == object:
                        out[name] = arr.tolist()
                        continue
                    t = torch.from_numpy(arr)
                    out[name] = t.pin_memory() if pinning else t
                yield out
        finally:
            self._active = False

    def arrays(self) -> Iterator[Dict[str, Any]]:
        """The epoch's batches as dicts of numpy arrays (no torch)."""
        resume = json.dumps(self._resume) if self._resume else ""
        self._resume = None
        self._client.start(self.epoch, resume)
        self._active = True
        while True:
            batch = self._client.next()
            if batch is None:
                return
            yield batch

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "Dataset":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
