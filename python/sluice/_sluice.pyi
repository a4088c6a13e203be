"""Typing stubs for the sluice extension module (see sluice/__init__.py)."""
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

class SpecError(ValueError):
    """A spec that does not check or compile (file:line:col: error: ...)."""

class PipelineError(RuntimeError):
    """A data or budget error while running (file, record, byte offset)."""

class Buffer:
    """The runtime buffer under an output array (the array's ``base``)."""
    @property
    def address(self) -> int: ...
    @property
    def nbytes(self) -> int: ...

ScheduleKnobs = Mapping[str, Union[int, str]]

class Pipeline(Iterator[Dict[str, np.ndarray]]):
    """A compiled, running pipeline; iterating yields dicts of numpy arrays."""
    def __init__(
        self,
        spec_path: str,
        *,
        epochs: Optional[int] = None,
        schedule: Union[None, str, Mapping[str, ScheduleKnobs]] = None,
        threads: int = 0,
        seed: Optional[int] = None,
        memory: Union[None, int, str] = None,
        first_epoch: int = 0,
        disable_passes: Sequence[str] = ...,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        jit: bool = True,
        pin_memory: bool = False,
    ) -> None: ...
    def state_dict(self) -> Dict[str, Any]: ...
    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...
    def __iter__(self) -> "Pipeline": ...
    def __next__(self) -> Dict[str, np.ndarray]: ...
    def __len__(self) -> int: ...
    def __enter__(self) -> "Pipeline": ...
    def __exit__(self, *exc: Any) -> None: ...
    def close(self) -> None: ...
    def restart(self, *, first_epoch: int) -> None: ...
    def stats(self) -> Dict[str, Any]: ...
    @property
    def outputs_per_epoch(self) -> Optional[int]: ...
    @property
    def output_type(self) -> Dict[str, str]: ...
    @property
    def epochs(self) -> int: ...
    @property
    def threads(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def world_size(self) -> int: ...
    @property
    def held_bytes(self) -> int: ...
    @property
    def schedule(self) -> Dict[str, Dict[str, Union[int, str]]]: ...
    @property
    def autotuned(self) -> bool: ...
    @property
    def schedule_explanation(self) -> str: ...
    @property
    def kernels(self) -> int: ...

def install_host_registrar(kind: str, library: str = "") -> Optional[str]:
    """Installs the page-locking registrar for pin_memory pipelines."""

def host_registrar() -> Optional[str]:
    """The installed registrar's name, or None."""

def pinned_stats() -> Dict[str, Any]:
    """Counters of the process's page-locked batch buffers."""

def host_registrar_log() -> Optional[Dict[str, Any]]:
    """What a recording registrar saw (None for another)."""

def check(spec_path: str) -> List[Dict[str, Any]]:
    """The typed stages of a spec: name, op, line, col, type {field: type}."""

def tune(
    spec_path: str,
    *,
    cores: Optional[int] = None,
    memory: Union[None, int, str] = None,
    seconds: float = 1.5,
    report_dir: Optional[str] = None,
    disable_passes: Sequence[str] = ...,
    jit: bool = True,
) -> Dict[str, Any]:
    """Runs the autotuner (as `sluice tune`); report.json as a dict plus
    ``schedule_yaml``."""
