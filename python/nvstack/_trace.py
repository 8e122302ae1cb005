"""Traces: ``nvstack.Trace``."""

from __future__ import annotations

import os
from typing import Iterator, Optional

import numpy as np

from . import _native
from ._common import Result


class Trace:
    """A block trace in any format the CLI reads (``nvstack.FORMATS``), streamed.

    ``Trace(path, format="msr")``; ``block_size`` (a power of two, 512 to 1 MiB) splits
    requests into block accesses; ``skip_bad_lines`` skips and counts malformed lines instead
    of raising; ``interarrival_us`` spaces fio v2 requests (they carry no times). Opening
    checks the arguments; a bad line raises :class:`nvstack.BadInput` naming the file, the
    line and what is wrong when it is read.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        format: str,
        block_size: int = 4096,
        skip_bad_lines: bool = False,
        interarrival_us: Optional[int] = None,
    ):
        self.path = os.fspath(path)
        self.format = format
        self.block_size = block_size
        self.skip_bad_lines = skip_bad_lines
        self.interarrival_us = interarrival_us
        # Checks format and block size now, and that the file opens (header included).
        _native.Reader(*self._args())

    def _args(self):
        return (self.path, self.format, self.block_size, self.skip_bad_lines, self.interarrival_us)

    def __repr__(self) -> str:
        return f"Trace({self.path!r}, format={self.format!r}, block_size={self.block_size})"

    def stat(self) -> Result:
        """What the trace holds as the simulator reads it: ``nvstack sim stat --json``."""
        return Result.from_json(_native.stat(*self._args()))

    def chunks(self, size: int = 65536) -> Iterator[dict[str, np.ndarray]]:
        """The block accesses in chunks of at most ``size``, each a dict of NumPy arrays:
        ``time_ns`` (uint64), ``key`` (uint64: stream << 48 | block number), ``is_write`` and
        ``sync`` (bool). Memory stays one chunk whatever the trace's length."""
        if not isinstance(size, int) or size <= 0:
            raise _native.BadInput(f"size {size!r}: give a positive number of accesses")
        reader = _native.Reader(*self._args())
        while True:
            cols = reader.chunk(size)
            if cols is None:
                return
            t, k, w, s = cols
            yield {
                "time_ns": np.frombuffer(t, dtype="<u8"),
                "key": np.frombuffer(k, dtype="<u8"),
                "is_write": np.frombuffer(w, dtype=np.uint8).astype(bool),
                "sync": np.frombuffer(s, dtype=np.uint8).astype(bool),
            }

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self.chunks()
