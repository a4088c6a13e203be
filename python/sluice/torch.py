"""PyTorch adapter: a sluice pipeline as a ``torch.utils.data.IterableDataset``.

    ds = sluice.torch.Dataset("spec.yaml")
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    for epoch in range(10):
        for batch in loader:          # len(loader) == batches per epoch
            ...

sluice batches and parallelizes by itself, so the DataLoader must not
(``batch_size=None``, ``num_workers=0``; other values are refused with a
message saying so). Each iteration runs one epoch of the spec, a new one
each time (epoch 0, 1, 2, ...: a new shuffle and new random augmentations,
as ``DataLoader(shuffle=True)`` gives); ``set_epoch(n)`` makes the next
iteration run epoch n instead (what a DistributedSampler user calls).
The compiled pipeline, its generated kernels, its schedule (the
autotuner's, for ``schedule: auto``) and its threads are kept between
epochs: an epoch that follows the last one continues the same running
pipeline. Numeric fields become tensors over the runtime's buffers
(``torch.from_numpy``, no copy); a bf16 field (``normalize: {dtype:
bf16}``, ``cast: {dtype: bf16}``) is a ``torch.bfloat16`` tensor over the
same bytes (sluice.Pipeline hands its bits over as uint16). Bytes and
string fields become Python lists of ``bytes`` / ``str``.
"""
import os
import sys
import warnings
from collections import deque
from typing import Any, Deque, Dict, Iterator, List, Optional, Tuple

import numpy as _np
import torch as _torch
from torch.utils.data import IterableDataset, get_worker_info

from ._sluice import Pipeline

__all__ = ["Dataset"]


class Dataset(IterableDataset):
    """One epoch of a sluice pipeline per iteration, as dicts of tensors.

    spec_path: the pipeline spec (YAML).
    pin_memory: batches in page-locked memory (for fast, asynchronous
        ``.to("cuda", non_blocking=True)``). sluice allocates its batch
        buffers page-locked where it makes them (the CUDA runtime's
        cudaHostRegister, through the registrar ``sluice._sluice.
        install_host_registrar`` installs once per process) and keeps them
        registered for reuse, counted in the memory budget: no copy
        (``stats()["pinned"]`` counts them; ``pinned_in_runtime`` says it
        is on). Fields under 64 KiB per batch (labels) are ordinary memory
        and copied into pinned memory as before. Where the CUDA runtime cannot be loaded, each batch is
        copied into pinned memory instead (``t.pin_memory()``), with a
        warning. Without a CUDA device it does nothing but warn once, as
        DataLoader's pin_memory does: the tensors stay zero-copy views of
        the runtime's buffers, so one script runs on a GPU host and a
        CPU-only one. ``pinning`` says whether batches are really pinned.
        SLUICE_PIN_REGISTRAR=record|mlock in the environment installs a
        registrar that needs no GPU instead (recording its calls; mlock
        also locks the pages): for tests of the bookkeeping.
    device: where the tensors go. None or "cpu": zero-copy CPU tensors.
        A CUDA device ("cuda", "cuda:1"): each batch is copied on a side
        stream ``device_prefetch`` batches ahead of the one the loop is
        given (from page-locked memory, so the copy is asynchronous); the
        loop's stream waits on an event before it uses a batch, and each
        host batch goes back to sluice's buffer pool once its copy is done.
        Without a CUDA device torch can see it warns once and yields CPU
        tensors (``device_in_use`` says which), so one script runs on both.
    device_prefetch: batches copied to the device ahead (default 2).
    channels_last: True (every 4-D numeric field) or a list of field names:
        an image batch the spec leaves in HWC layout (no ``transpose: {to:
        CHW}``), [N, H, W, C], is handed over as an [N, C, H, W] tensor in
        ``torch.channels_last`` memory format: a view of the same bytes, no
        copy (``permute(0, 3, 1, 2)``), which a model converted with
        ``model.to(memory_format=torch.channels_last)`` takes as it is.
    epoch: the epoch the first iteration runs (see ``set_epoch``).
    Other keyword arguments (threads, seed, memory, schedule,
    disable_passes, jit, rank, world_size) go to ``sluice.Pipeline``; rank
    and world_size default to torch.distributed's when the program has
    initialised a process group (unless the spec's ``distributed:`` says
    otherwise).
    """

    def __init__(self, spec_path: str, *, pin_memory: bool = False,
                 device: Any = None, device_prefetch: int = 2,
                 channels_last: Any = False, epoch: int = 0,
                 **pipeline_kwargs: Any) -> None:
        super().__init__()
        if "epochs" in pipeline_kwargs or "first_epoch" in pipeline_kwargs:
            raise TypeError("Dataset runs one epoch per iteration; choose it "
                            "with set_epoch(n) instead of epochs/first_epoch")
        if epoch < 0:
            raise ValueError("epoch must be >= 0")
        self.spec_path = spec_path
        self.pin_memory = pin_memory
        #: Whether batches are in page-locked memory: pin_memory (or a
        #: CUDA device=) and a CUDA device torch can see.
        self.pinning = bool(pin_memory) and _torch.cuda.is_available()
        #: Whether sluice allocates the batches pinned itself (no copy):
        #: pinning, or a test registrar (SLUICE_PIN_REGISTRAR), with the
        #: registrar installed.
        self.pinned_in_runtime = False
        if pin_memory and not self.pinning and _test_registrar():
            self.pinned_in_runtime = _install_registrar()
        elif pin_memory and not self.pinning:
            warnings.warn("sluice.torch.Dataset: pin_memory=True, but torch "
                          "sees no CUDA device, so batches are not pinned "
                          "(page-locked memory only speeds up copies to a "
                          "GPU); they stay zero-copy views of sluice's "
                          "buffers", UserWarning, stacklevel=2)
        if isinstance(channels_last, str):
            channels_last = [channels_last]
        #: Fields handed over as channels_last NCHW views (True: every 4-D
        #: numeric field).
        self.channels_last = channels_last if channels_last is True else \
            frozenset(channels_last or ())
        if device_prefetch < 1:
            raise ValueError("device_prefetch must be >= 1")
        self.device_prefetch = device_prefetch
        #: The device the batches are on ("cpu", or the CUDA device).
        self.device_in_use = _torch.device("cpu")
        self._copier: Optional[_DeviceCopier] = None
        if device is not None and _torch.device(device).type != "cpu":
            dev = _torch.device(device)
            if dev.type == "cuda" and _torch.cuda.is_available():
                self.device_in_use = dev
                self.pinning = True
                self._copier = _DeviceCopier(_CudaStreams(dev),
                                             device_prefetch)
            elif dev.type == "cuda":
                warnings.warn("sluice.torch.Dataset: device=%r, but torch "
                              "sees no CUDA device; batches stay on the CPU"
                              % str(device), UserWarning, stacklevel=2)
            else:
                raise ValueError("device must be None, 'cpu' or a CUDA "
                                 "device, got %r" % str(device))
        if self.pinning:
            self.pinned_in_runtime = _install_registrar()
        #: The epoch the next iteration runs: one more after each
        #: iteration begins, or what ``set_epoch`` set.
        self.epoch = epoch
        self._kwargs = pipeline_kwargs
        # The pipeline, made once (epochs=-1: it runs epoch after epoch)
        # and restarted only for an epoch that does not follow the last.
        self._pipe: Optional[Pipeline] = None
        self._pipe_pid = 0
        # Fields of the output type that are bf16 (uint16 bits in numpy).
        self._bf16: frozenset = frozenset()
        # The epoch whose first batch the running pipeline delivers next
        # (None: it is inside an epoch left early).
        self._at: Optional[int] = None
        # A first batch of the next epoch, read while looking for the end of
        # an epoch whose length is not known in advance.
        self._stash: Optional[Dict[str, Any]] = None
        # The epoch being iterated (None between iterations).
        self._running: Optional[int] = None
        self._resume: Optional[Dict[str, Any]] = None

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration run epoch ``epoch`` (0-based)."""
        if epoch < 0:
            raise ValueError("epoch must be >= 0")
        self.epoch = epoch

    def __len__(self) -> int:
        """Batches per epoch, when the spec lets sluice know it in advance
        (a source that knows its size and no filter or unbatch step)."""
        n = self.pipeline().outputs_per_epoch
        if n is None:
            raise TypeError(
                "len() of a sluice.torch.Dataset: the number of batches of "
                "an epoch of %s is not known in advance (a filter, unbatch "
                "or skip of bad records changes it, or the source does not "
                "know its size); count the batches as they come" %
                self.spec_path)
        return n

    def state_dict(self) -> Dict[str, Any]:
        """Where the current epoch stands (after the batches yielded so
        far); ``load_state_dict`` on a new Dataset continues from there.
        Between epochs: the epoch the next iteration runs."""
        if self._running is not None and self._pipe is not None:
            return {"epoch": self._running,
                    "pipeline": self._pipe.state_dict()}
        return {"epoch": self.epoch, "pipeline": self._resume}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Makes the next iteration continue a saved epoch exactly."""
        self.epoch = int(state["epoch"])
        self._resume = state.get("pipeline")

    def pipeline(self) -> Pipeline:
        """The sluice.Pipeline this Dataset runs (made on first use: the
        spec is compiled and, for ``schedule: auto``, profiled once)."""
        if self._pipe is not None and self._pipe_pid != os.getpid():
            # Made before this process forked (a DataLoader worker): its
            # threads are the parent's. Left alone; this process makes its
            # own.
            self._pipe = None
            self._stash = None
        if self._pipe is None:
            kwargs = dict(self._kwargs)
            if self.pinned_in_runtime and _install_registrar():
                kwargs["pin_memory"] = True
            self._pipe = Pipeline(self.spec_path, epochs=-1,
                                  first_epoch=self.epoch, **kwargs)
            self._pipe_pid = os.getpid()
            self._at = self.epoch
            self._bf16 = frozenset(
                name for name, t in self._pipe.output_type.items()
                if t.startswith("bf16"))
        return self._pipe

    def __getstate__(self) -> Dict[str, Any]:
        # A copy in another process (a spawned DataLoader worker) makes its
        # own pipeline and device streams.
        state = dict(self.__dict__)
        state.update(_pipe=None, _stash=None, _at=None, _running=None)
        if state["_copier"] is not None:
            state["_copier"] = None
            state["device_in_use"] = _torch.device("cpu")
        return state

    def stats(self) -> Dict[str, Any]:
        """The pipeline's counters (``sluice.Pipeline.stats``); the
        "consumer" entry is the stall meter: how long this process waited
        for batches (``wait_seconds``, ``mean_wait_seconds``, ``stalls``)
        and the pipeline's headspace while the training step ran. With
        ``pinned_in_runtime``, "pinned" holds the counters of the process's
        page-locked batch buffers (``sluice._sluice.pinned_stats()``)."""
        st = self.pipeline().stats()
        if self.pinned_in_runtime:
            from . import _sluice
            st["pinned"] = _sluice.pinned_stats()
        return st

    def close(self) -> None:
        """Stops the pipeline's threads (a later iteration starts them
        again)."""
        if self._pipe is not None:
            self._pipe.close()
            self._pipe = None
            self._stash = None
            self._at = None

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                "sluice.torch.Dataset runs its own worker threads; use "
                "DataLoader(ds, batch_size=None, num_workers=0) (with "
                "num_workers > 1 every worker would yield the whole epoch)")
        _refuse_batching_loader()
        epoch = self.epoch
        self.epoch = epoch + 1
        pipe = self.pipeline()
        if self._resume is not None:
            pipe.restart(first_epoch=epoch)
            pipe.load_state_dict(self._resume)
            self._resume = None
            self._stash = None
        elif self._at != epoch:
            pipe.restart(first_epoch=epoch)
            self._stash = None
        self._at = None
        self._running = epoch
        batches = self._batches(pipe, epoch)
        if self._copier is not None:
            return self._copier.run(batches)
        return batches

    def _batches(self, pipe: Pipeline,
                 epoch: int) -> Iterator[Dict[str, Any]]:
        # With the epoch's length known, the iteration ends after its last
        # batch without reading the next epoch's first (which would make it
        # and hold its buffer for an iteration that may never come).
        n = pipe.outputs_per_epoch
        count = 0
        try:
            while True:
                if n is not None and count == n:
                    self._at = epoch + 1
                    return
                if self._stash is not None:
                    batch, self._stash = self._stash, None
                else:
                    try:
                        batch = next(pipe)
                    except StopIteration:
                        return
                    if pipe.epoch != epoch:
                        # The next epoch's first batch: kept for it.
                        self._stash = batch
                        self._at = pipe.epoch
                        return
                count += 1
                yield self._convert(batch)
        finally:
            self._running = None

    def _convert(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for name, arr in batch.items():
            if arr.dtype == object:
                out[name] = arr.tolist()
                continue
            if name in self._bf16:  # the bits, viewed: no copy
                t = _torch.from_numpy(arr.view(_np.int16)).view(
                    _torch.bfloat16)
            else:
                t = _torch.from_numpy(arr)
            cl = self.channels_last
            if (t.dim() == 4) if cl is True else (name in cl):
                if t.dim() != 4:
                    raise ValueError(
                        "channels_last: field %r is %s, not a 4-D batch of "
                        "HWC images [N, H, W, C]; leave the spec's images in "
                        "HWC layout (no transpose to CHW) and batch them" %
                        (name, list(t.shape)))
                t = t.permute(0, 3, 1, 2)  # NCHW view of NHWC memory
            # With the runtime's pinned buffers only a field it did not
            # allocate pinned (a padded_batch's) is copied.
            if self.pinning and not (self.pinned_in_runtime and
                                     t.is_pinned()):
                t = t.pin_memory()
            out[name] = t
        return out


# The process's registrar: (pid, installed) once tried in this process.
_registrar: Optional[Tuple[int, bool]] = None


def _test_registrar() -> Optional[str]:
    kind = os.environ.get("SLUICE_PIN_REGISTRAR", "")
    return kind if kind in ("record", "mlock") else None


def _install_registrar() -> bool:
    """Installs the host registrar sluice's pinned batch buffers need (once
    per process: a forked or spawned worker installs its own): the CUDA
    runtime torch loaded, or SLUICE_PIN_REGISTRAR's test one. False, with a
    warning, when it cannot (then batches are copied into pinned memory)."""
    global _registrar
    if _registrar is not None and _registrar[0] == os.getpid():
        return _registrar[1]
    from . import _sluice
    kind = _test_registrar() or "cuda"
    try:
        if kind == "cuda":
            _torch.cuda.init()  # loads the CUDA runtime torch links
        _sluice.install_host_registrar(kind)
        ok = True
    except RuntimeError as e:
        warnings.warn("sluice.torch.Dataset: sluice cannot page-lock its "
                      "batch buffers (%s); each batch is copied into pinned "
                      "memory instead" % e, UserWarning, stacklevel=3)
        ok = False
    _registrar = (os.getpid(), ok)
    return ok


class _CudaStreams:
    """The CUDA side of _DeviceCopier: a side stream to copy on, events,
    and the loop's stream waiting on them."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.stream = _torch.cuda.Stream(device)

    def copy(self, t: Any) -> Any:
        with _torch.cuda.stream(self.stream):
            return t.to(self.device, non_blocking=True)

    def record(self) -> Any:
        ev = _torch.cuda.Event()
        ev.record(self.stream)
        return ev

    def hand_over(self, ev: Any, tensors: List[Any]) -> None:
        cur = _torch.cuda.current_stream(self.device)
        cur.wait_event(ev)
        for t in tensors:  # allocated on the side stream, used on this one
            t.record_stream(cur)

    def done(self, ev: Any) -> bool:
        return bool(ev.query())


class _DeviceCopier:
    """Copies batches to a device ``depth`` batches ahead of the consumer.

    Each batch's numeric tensors are copied by ``streams`` (a side stream)
    and an event is recorded after them; the batch is handed over when the
    consumer asks for it (its stream waits on the event: the GPU orders the
    copy before the use, the CPU does not block). The host batch stays
    referenced until its event has completed, then is dropped, which
    returns its buffer to sluice's pool: the runtime never overwrites
    memory a copy still reads. ``ahead`` and ``held`` say how many batches
    are in each state (for tests and stats)."""

    def __init__(self, streams: Any, depth: int) -> None:
        self.streams = streams
        self.depth = depth
        self.ahead = 0
        self._held: Deque[Tuple[Any, Dict[str, Any]]] = deque()

    @property
    def held(self) -> int:
        return len(self._held)

    def _start(self, batch: Dict[str, Any]) -> Tuple[Dict[str, Any], Any,
                                                      Dict[str, Any]]:
        out: Dict[str, Any] = {}
        for name, v in batch.items():
            out[name] = self.streams.copy(v) \
                if isinstance(v, _torch.Tensor) else v
        return out, self.streams.record(), batch

    def _reap(self) -> None:
        while self._held and self.streams.done(self._held[0][0]):
            self._held.popleft()

    def run(self, batches: Iterator[Dict[str, Any]]) -> \
            Iterator[Dict[str, Any]]:
        pending: Deque[Tuple[Dict[str, Any], Any, Dict[str, Any]]] = deque()
        ended = False

        def fill() -> None:
            nonlocal ended
            while not ended and len(pending) < self.depth:
                try:
                    pending.append(self._start(next(batches)))
                except StopIteration:
                    ended = True

        try:
            fill()
            while pending:
                out, ev, host = pending.popleft()
                self.streams.hand_over(
                    ev, [v for v in out.values()
                         if isinstance(v, _torch.Tensor)])
                self._held.append((ev, host))
                del host
                self._reap()
                fill()  # `depth` copies under way while the loop works
                self.ahead = len(pending)
                yield out
        finally:
            # Left early: the copies under way still read their host
            # batches; keep those until they are done.
            for _, ev, host in pending:
                self._held.append((ev, host))
            pending.clear()
            self.ahead = 0
            self._reap()
            batches.close()


def _refuse_batching_loader() -> None:
    """Raises when the caller is a DataLoader that batches (batch_size not
    None): it would stack each sluice batch into a batch of one, a
    (1, 128, 3, 224, 224) tensor, without an error. The DataLoader is found
    as the fetcher that called iter() on the Dataset (torch's
    _IterableDatasetFetcher, in this process or a worker)."""
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            return
        fetcher = frame.f_locals.get("self")
        if type(fetcher).__name__ == "_IterableDatasetFetcher":
            if getattr(fetcher, "auto_collation", False):
                raise ValueError(
                    "sluice.torch.Dataset yields whole batches (the spec's "
                    "batch step makes them), so the DataLoader must not "
                    "batch them again: DataLoader(ds) with its default "
                    "batch_size=1 would yield each as a batch of one, shape "
                    "(1, batch, ...). Write DataLoader(ds, batch_size=None, "
                    "num_workers=0), or iterate over ds itself")
            return
        frame = frame.f_back
