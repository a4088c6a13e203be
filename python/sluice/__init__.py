"""sluice: declarative input pipelines for ML training, from Python.

    import sluice
    for batch in sluice.Pipeline("spec.yaml", epochs=2):
        images = torch.from_numpy(batch["image"])   # no copy

The pipeline itself (reading, decoding, augmenting, shuffling, batching) runs
in sluice's native runtime on its own threads; this package only hands its
outputs to Python. See ``sluice.torch`` for a PyTorch IterableDataset.
"""
from ._sluice import Buffer, Pipeline, PipelineError, SpecError, check, tune

__all__ = ["Buffer", "Pipeline", "PipelineError", "SpecError", "check",
           "tune"]
__version__ = "0.1.0"
