from typing import Optional, Sequence, Union

from ._common import Lifetimes, Points, Result
from ._trace import Trace

Size = Union[int, str]

def cache(
    trace: Trace,
    model: str,
    policy: str = "lru",
    volatile: Size = 0,
    nvram: Size = 0,
    delayed_writeback: Union[int, str, None] = None,
    seed: int = 1,
) -> Result:
    """One cache model over the trace: ``nvstack sim cache --json``."""

def lfs(
    trace: Trace,
    nvram: Size = "512KiB",
    segment_size: Size = "512KiB",
    metadata_size: Size = "4KiB",
    summary_size: Size = 512,
    fsync_every: Optional[int] = None,
    timeout: Union[int, str] = 30,
) -> Result:
    """The LFS write buffer: ``nvstack sim lfs --json``."""

def lifetimes(trace: Trace, delays_ns: Optional[Sequence[int]] = None) -> Lifetimes:
    """Byte lifetimes (Figure 2): ``nvstack sim lifetimes --json``."""

def nvram_size(trace: Trace, nvram: Optional[Sequence[Size]] = None, progress: bool = True) -> Points:
    """Figure 3: ``nvstack sim nvram-size --json``."""

def policies(
    trace: Trace,
    model: str = "unified",
    volatile: Size = "8MiB",
    nvram: Optional[Sequence[Size]] = None,
    seeds: int = 5,
    progress: bool = True,
) -> Points:
    """Figure 4: ``nvstack sim policies --json``."""

def models(
    trace: Trace,
    volatile: Sequence[Size] = ("8MiB", "16MiB"),
    added: Optional[Sequence[Size]] = None,
    progress: bool = True,
) -> Points:
    """Figures 5 and 6: ``nvstack sim models --json``."""

def bus(
    trace: Trace,
    volatile: Size = "8MiB",
    nvram: Sequence[Size] = ("1MiB", "8MiB"),
    progress: bool = True,
) -> Points:
    """Section 2.6: ``nvstack sim bus --json``."""

def fate(
    trace: Trace,
    volatile: Size = "8MiB",
    nvram: Sequence[Size] = ("128KiB", "1MiB", "8MiB"),
    policy: str = "lru",
    progress: bool = True,
) -> Result:
    """Table 2: ``nvstack sim fate --json``; ``to_pandas()`` gives a row per cache."""
