from typing import Tuple

from . import sim as sim
from ._common import Lifetimes as Lifetimes, Points as Points, Result as Result
from ._trace import Trace as Trace
from ._device import Device as Device
from .sweep import sweep as sweep

class BadInput(ValueError):
    """Bad input: an argument, a trace line, a grid file (the CLI's exit 2)."""

class EnvironmentFault(OSError):
    """A file could not be read or written (the CLI's exit 3)."""

class Finding(RuntimeError):
    """A finding (the CLI's exit 1)."""

MODELS: Tuple[str, ...]
POLICIES: Tuple[str, ...]
FORMATS: Tuple[str, ...]
__version__: str
