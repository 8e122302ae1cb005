"""The unit of a distributed sweep: one grid task, run where a worker calls it. Kept in its own
small module so that a Dask worker unpickles it by name (workers import nvstack)."""

from __future__ import annotations

from . import _native


def run_task(text: str, file: str, folder: str, index: int) -> tuple[str, str]:
    """Run task ``index`` of the grid ``text`` (read from ``file``; relative trace paths from
    ``folder``). Returns ("ok", the result's JSON) or ("error", what went wrong): a failed
    point is reported with its parameters by the caller, never dropped."""
    try:
        return ("ok", _native.run_task(text, file, folder, index))
    except Exception as e:  # every failure of the point is its report
        return ("error", f"{type(e).__name__}: {e}")
