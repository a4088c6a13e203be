"""PyTorch adapter: a sluice pipeline as a ``torch.utils.data.IterableDataset``.

    ds = sluice.torch.Dataset("spec.yaml")
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
    for epoch in range(10):
        ds.set_epoch(epoch)
        for batch in loader:
            ...

sluice batches and parallelizes by itself, so the DataLoader must not
(``batch_size=None``, ``num_workers=0``). Each iteration runs one epoch of
the spec: ``set_epoch(n)`` picks which (its shuffle and random augmentations
are those of epoch n). Numeric fields become tensors over the runtime's
buffers (``torch.from_numpy``, no copy); bytes and string fields become
Python lists of ``bytes`` / ``str``.
"""
import warnings
from typing import Any, Dict, Iterator, Optional

import torch as _torch
from torch.utils.data import IterableDataset, get_worker_info

from ._sluice import Pipeline

__all__ = ["Dataset"]


class Dataset(IterableDataset):
    """One epoch of a sluice pipeline per iteration, as dicts of tensors.

    spec_path: the pipeline spec (YAML).
    pin_memory: copy each batch into page-locked memory (for fast,
        asynchronous ``.to("cuda", non_blocking=True)``). Without a CUDA
        device it does nothing but warn once, as DataLoader's pin_memory
        does: the tensors stay zero-copy views of the runtime's buffers, so
        one script runs on a GPU host and a CPU-only one. ``pinning``
        says whether batches are really pinned.
    epoch: the epoch the next iteration runs (see ``set_epoch``).
    Other keyword arguments (threads, seed, memory, schedule,
    disable_passes, jit) go to ``sluice.Pipeline``.
    """

    def __init__(self, spec_path: str, *, pin_memory: bool = False,
                 epoch: int = 0, **pipeline_kwargs: Any) -> None:
        super().__init__()
        if "epochs" in pipeline_kwargs or "first_epoch" in pipeline_kwargs:
            raise TypeError("Dataset runs one epoch per iteration; choose it "
                            "with set_epoch(n) instead of epochs/first_epoch")
        self.spec_path = spec_path
        self.pin_memory = pin_memory
        #: Whether batches are copied into page-locked memory: pin_memory
        #: and a CUDA device torch can see.
        self.pinning = bool(pin_memory) and _torch.cuda.is_available()
        if pin_memory and not self.pinning:
            warnings.warn("sluice.torch.Dataset: pin_memory=True, but torch "
                          "sees no CUDA device, so batches are not pinned "
                          "(page-locked memory only speeds up copies to a "
                          "GPU); they stay zero-copy views of sluice's "
                          "buffers", UserWarning, stacklevel=2)
        self.epoch = epoch
        self._kwargs = pipeline_kwargs
        self._pipeline: Optional[Pipeline] = None
        self._resume: Optional[Dict[str, Any]] = None

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration run epoch ``epoch`` (0-based)."""
        if epoch < 0:
            raise ValueError("epoch must be >= 0")
        self.epoch = epoch

    def state_dict(self) -> Dict[str, Any]:
        """Where the current epoch stands (after the batches yielded so
        far); ``load_state_dict`` on a new Dataset continues from there."""
        if self._pipeline is not None:
            return {"epoch": self.epoch,
                    "pipeline": self._pipeline.state_dict()}
        if self._resume is not None:
            return {"epoch": self.epoch, "pipeline": self._resume}
        return {"epoch": self.epoch, "pipeline": None}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Makes the next iteration continue a saved epoch exactly."""
        self.epoch = int(state["epoch"])
        self._resume = state.get("pipeline")

    def pipeline(self) -> Pipeline:
        """A new sluice.Pipeline for the current epoch. A spec with
        ``schedule: auto`` is profiled for the first epoch only: later
        epochs reuse the schedule the autotuner chose then."""
        pipe = Pipeline(self.spec_path, epochs=self.epoch + 1,
                        first_epoch=self.epoch, **self._kwargs)
        if pipe.autotuned:
            self._kwargs = dict(self._kwargs, schedule=pipe.schedule)
        return pipe

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        info = get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError(
                "sluice.torch.Dataset runs its own worker threads; use "
                "DataLoader(ds, batch_size=None, num_workers=0) (with "
                "num_workers > 1 every worker would yield the whole epoch)")
        pipe = self.pipeline()
        if self._resume is not None:
            pipe.load_state_dict(self._resume)
            self._resume = None
        self._pipeline = pipe
        try:
            for batch in pipe:
                yield self._convert(batch)
        finally:
            pipe.close()
            self._pipeline = None

    def _convert(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for name, arr in batch.items():
            if arr.dtype == object:
                out[name] = arr.tolist()
                continue
            t = _torch.from_numpy(arr)
            if self.pinning:
                t = t.pin_memory()
            out[name] = t
        return out
