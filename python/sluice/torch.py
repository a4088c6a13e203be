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
from typing import Any, Dict, Iterator, Optional

import torch as _torch
from torch.utils.data import IterableDataset, get_worker_info

from ._sluice import Pipeline

__all__ = ["Dataset"]


class Dataset(IterableDataset):
    """One epoch of a sluice pipeline per iteration, as dicts of tensors.

    spec_path: the pipeline spec (YAML).
    pin_memory: copy each batch into page-locked memory (for fast,
        asynchronous ``.to("cuda", non_blocking=True)``); needs CUDA.
    epoch: the epoch the next iteration runs (see ``set_epoch``).
    Other keyword arguments (threads, seed, memory, schedule,
    disable_passes) go to ``sluice.Pipeline``.
    """

    def __init__(self, spec_path: str, *, pin_memory: bool = False,
                 epoch: int = 0, **pipeline_kwargs: Any) -> None:
        super().__init__()
        if "epochs" in pipeline_kwargs or "first_epoch" in pipeline_kwargs:
            raise TypeError("Dataset runs one epoch per iteration; choose it "
                            "with set_epoch(n) instead of epochs/first_epoch")
        if pin_memory and not _torch.cuda.is_available():
            raise ValueError("pin_memory=True needs CUDA (page-locked memory "
                             "only helps copies to a GPU), and torch sees no "
                             "CUDA device")
        self.spec_path = spec_path
        self.pin_memory = pin_memory
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
        """A new sluice.Pipeline for the current epoch."""
        return Pipeline(self.spec_path, epochs=self.epoch + 1,
                        first_epoch=self.epoch, **self._kwargs)

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
            if self.pin_memory:
                t = t.pin_memory()
            out[name] = t
        return out
