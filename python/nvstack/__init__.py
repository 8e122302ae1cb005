"""nvstack from Python: the trace-driven NVRAM simulator of nvstack (Rust, via the extension
module ``nvstack._native``).

- :class:`Trace`: a block trace streamed in NumPy chunks; ``.stat()``.
- :mod:`nvstack.sim`: ``cache``, ``lfs``, ``lifetimes``, ``nvram_size``, ``policies``,
  ``models``, ``bus``: the CLI's ``--json`` fields, ``.to_pandas()``.
- :class:`Device`: an nvramdisk image: format, open, read, write (atomic), discard, check.
- :func:`sweep`: a grid file's sweep as one DataFrame, locally or on a Dask cluster;
  ``python -m nvstack.sweep`` writes the CLI's sweep files.

Errors: :class:`BadInput` (a ValueError), :class:`EnvironmentFault` (an OSError),
:class:`Finding` (a RuntimeError).
"""

from . import _native
from ._native import BadInput, EnvironmentFault, Finding
from ._common import Lifetimes, Points, Result
from ._trace import Trace
from ._device import Device
from . import sim
from .sweep import sweep

MODELS = tuple(_native.MODELS)
POLICIES = tuple(_native.POLICIES)
FORMATS = tuple(_native.FORMATS)

__version__ = "0.1.0"
__all__ = [
    "BadInput",
    "Device",
    "EnvironmentFault",
    "Finding",
    "FORMATS",
    "Lifetimes",
    "MODELS",
    "POLICIES",
    "Points",
    "Result",
    "Trace",
    "sim",
    "sweep",
]
