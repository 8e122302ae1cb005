"""The trace-driven simulator (``nvstack sim ...``): each function returns the fields of the
CLI subcommand's ``--json`` output, with ``.to_pandas()``. The simulation runs in Rust with the
GIL released; analyses of many runs use every core and draw a tqdm bar (``progress=False``
turns it off)."""

from __future__ import annotations

from typing import Optional, Sequence, Union

from . import _native
from ._common import Bar, Lifetimes, Points, Result, size, sizes
from ._trace import Trace

Size = Union[int, str]


def _trace(trace: Trace):
    if not isinstance(trace, Trace):
        raise _native.BadInput(f"trace: expected an nvstack.Trace, not {type(trace).__name__}")
    return trace._args()


def cache(
    trace: Trace,
    model: str,
    policy: str = "lru",
    volatile: Size = 0,
    nvram: Size = 0,
    delayed_writeback: Union[int, str, None] = None,
    seed: int = 1,
) -> Result:
    """One cache model over the trace: ``nvstack sim cache --json``.

    ``model``: volatile, write-aside or unified; ``policy``: the NVRAM's replacement (lru,
    random, omniscient, ...); ``volatile`` and ``nvram``: sizes, multiples of the block size
    (``nvram=0`` for the volatile model); ``delayed_writeback``: the volatile model's cleaner
    delay in whole seconds or ``"off"`` (default 30); ``seed``: the random policy's seed.
    """
    dw = None if delayed_writeback is None else str(delayed_writeback)
    return Result.from_json(
        _native.cache_run(
            *_trace(trace), model, policy, size(volatile, "volatile"), size(nvram, "nvram"), dw, seed
        )
    )


def lfs(
    trace: Trace,
    nvram: Size = "512KiB",
    segment_size: Size = "512KiB",
    metadata_size: Size = "4KiB",
    summary_size: Size = 512,
    fsync_every: Optional[int] = None,
    timeout: Union[int, str] = 30,
) -> Result:
    """The LFS write buffer (Tables 3 and 4): ``nvstack sim lfs --json``. ``timeout`` in whole
    seconds or ``"off"``; ``fsync_every``: a sync after every N-th write request."""
    return Result.from_json(
        _native.lfs_run(
            *_trace(trace),
            size(segment_size, "segment_size"),
            size(metadata_size, "metadata_size"),
            size(summary_size, "summary_size"),
            size(nvram, "nvram"),
            fsync_every,
            str(timeout),
        )
    )


def lifetimes(trace: Trace, delays_ns: Optional[Sequence[int]] = None) -> Lifetimes:
    """Byte lifetimes (Figure 2): ``nvstack sim lifetimes --json``; default delays 1 ms to 1 d."""
    d = None if delays_ns is None else [int(x) for x in delays_ns]
    return Lifetimes.from_json(_native.lifetimes_run(*_trace(trace), d))


def _points(trace, which, model="unified", volatile=(), grid=None, seeds=1, progress=True):
    text = _native.analysis_run(
        *_trace(trace), which, model, volatile, grid, seeds, Bar(progress)
    )
    import json

    return Points(Result(p) for p in json.loads(text))


def nvram_size(trace: Trace, nvram: Optional[Sequence[Size]] = None, progress: bool = True) -> Points:
    """Net write traffic against NVRAM size, omniscient write buffer (Figure 3):
    ``nvstack sim nvram-size --json``."""
    return _points(trace, "nvram-size", grid=sizes(nvram, "nvram"), progress=progress)


def policies(
    trace: Trace,
    model: str = "unified",
    volatile: Size = "8MiB",
    nvram: Optional[Sequence[Size]] = None,
    seeds: int = 5,
    progress: bool = True,
) -> Points:
    """LRU against random against omniscient (Figure 4): ``nvstack sim policies --json``."""
    return _points(
        trace, "policies", model, [size(volatile, "volatile")], sizes(nvram, "nvram"), seeds, progress
    )


def models(
    trace: Trace,
    volatile: Sequence[Size] = ("8MiB", "16MiB"),
    added: Optional[Sequence[Size]] = None,
    progress: bool = True,
) -> Points:
    """The three models as memory is added (Figures 5, 6): ``nvstack sim models --json``."""
    return _points(
        trace, "models", volatile=sizes(volatile, "volatile"), grid=sizes(added, "added"), progress=progress
    )


def bus(
    trace: Trace,
    volatile: Size = "8MiB",
    nvram: Sequence[Size] = ("1MiB", "8MiB"),
    progress: bool = True,
) -> Points:
    """NVRAM accesses and memory-bus blocks (section 2.6): ``nvstack sim bus --json``."""
    return _points(
        trace, "bus", volatile=[size(volatile, "volatile")], grid=sizes(nvram, "nvram"), progress=progress
    )


def fate(
    trace: Trace,
    volatile: Size = "8MiB",
    nvram: Sequence[Size] = ("128KiB", "1MiB", "8MiB"),
    policy: str = "lru",
    progress: bool = True,
) -> Result:
    """The fate of written blocks (Table 2): ``nvstack sim fate --json``; ``to_pandas()``
    gives a row per cache (the infinite NVRAM first)."""
    r = Result.from_json(
        _native.fate_run(
            *_trace(trace), size(volatile, "volatile"), sizes(nvram, "nvram"), policy, Bar(progress)
        )
    )
    return _Fate(r.to_dict())


class _Fate(Result):
    def to_pandas(self):
        import pandas as pd

        df = pd.DataFrame(self._data["rows"])
        df.insert(0, "trace", self._data["trace"])
        return df
