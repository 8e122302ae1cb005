"""Sweeps of a grid file (docs/sim.md "The grid file") as one DataFrame, on local cores or on
a Dask cluster; ``python -m nvstack.sweep`` writes the files ``nvstack sim sweep`` writes.

    python -m nvstack.sweep [--scheduler ADDRESS] GRID.toml --output DIR

Every worker must import nvstack (the same version) and see the trace paths the grid names.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Optional

from . import _native
from ._tasks import run_task


@dataclass
class SweepRun:
    """A grid and what its tasks gave: results (JSON) and errors by task index."""

    text: str
    file: str
    folder: str
    params: list[dict[str, str]]
    results: dict[int, str] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def complete(self) -> bool:
        return not self.errors and len(self.results) == len(self.params)

    def ordered(self) -> list[str]:
        return [self.results[i] for i in range(len(self.params))]


def load(grid: Any) -> SweepRun:
    """Read and check a grid file (raises BadInput naming file, key and fault)."""
    if not isinstance(grid, (str, os.PathLike)):
        raise _native.BadInput(f"grid: expected the path of a grid file, not {type(grid).__name__}")
    path = os.path.abspath(os.fspath(grid))
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise _native.BadInput(f"{os.fspath(grid)}: cannot read the grid: {e.strerror}") from None
    params = _native.grid_tasks(text, os.fspath(grid), os.path.dirname(path))
    return SweepRun(text, os.fspath(grid), os.path.dirname(path), [dict(p) for p in params])


def _bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="sweep", unit="run", disable=not enabled)


def _local(run: SweepRun, progress: bool, workers: Optional[int]) -> None:
    n = len(run.params)
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool, _bar(n, progress) as bar:
        futures = {pool.submit(run_task, run.text, run.file, run.folder, i): i for i in range(n)}
        for f in as_completed(futures):
            _record(run, futures[f], f.result())
            bar.update(1)


def _dask(run: SweepRun, client: Any, progress: bool) -> None:
    from distributed import as_completed as dask_completed

    n = len(run.params)
    token = f"{os.getpid()}-{time.time_ns()}"
    futures = {
        client.submit(run_task, run.text, run.file, run.folder, i, key=f"nvstack-sweep-{token}-{i}", pure=False): i
        for i in range(n)
    }
    with _bar(n, progress) as bar:
        for f in dask_completed(futures):
            i = futures[f]
            if f.status == "finished":
                _record(run, i, f.result())
            else:  # the task itself failed on the cluster (e.g. its workers kept dying)
                run.errors[i] = f"{type(f.exception()).__name__}: {f.exception()}"
            bar.update(1)


def _record(run: SweepRun, i: int, outcome: tuple[str, str]) -> None:
    status, value = outcome
    if i in run.results or i in run.errors:
        raise AssertionError(f"task {i} reported twice")
    if status == "ok":
        run.results[i] = value
    else:
        run.errors[i] = value


def execute(grid: Any, client: Any = None, progress: bool = True, workers: Optional[int] = None) -> SweepRun:
    """Run every task of the grid; nothing is dropped: each task ends in results or errors."""
    run = load(grid)
    started = time.perf_counter()
    if client is None:
        _local(run, progress, workers)
    else:
        _dask(run, client, progress)
    run.seconds = time.perf_counter() - started
    assert len(run.results) + len(run.errors) == len(run.params)
    return run


def frame(run: SweepRun):
    """The rows of a sweep as one DataFrame: exactly ``sweep.csv``'s rows when every task
    succeeded; otherwise each task's own rows and, for a failed task, its parameters and an
    ``error`` column."""
    import pandas as pd

    if run.complete:
        csv = _native.sweep_csv(run.text, run.file, run.folder, run.ordered())
        df = pd.read_csv(io.StringIO(csv))
        df.attrs["csv"] = csv
        df.attrs["failed"] = []
        return df
    parts = []
    for i, p in enumerate(run.params):
        if i in run.results:
            parts.append(pd.read_csv(io.StringIO(_native.task_csv(run.results[i]))))
        else:
            parts.append(pd.DataFrame([{**p, "error": run.errors[i]}]))
    df = pd.concat(parts, ignore_index=True, sort=False)
    if "error" not in df.columns:
        df["error"] = None
    df.attrs["failed"] = [{**run.params[i], "error": e} for i, e in sorted(run.errors.items())]
    return df


def sweep(grid: Any, client: Any = None, progress: bool = True, workers: Optional[int] = None):
    """Run a grid file's sweep; one DataFrame with a row per run (``sweep.csv``'s rows).

    With no ``client`` the tasks run on this machine's cores (``workers`` threads; the
    simulation releases the GIL). With a ``dask.distributed.Client`` each task is a task on
    the cluster; a worker that dies has its tasks run again elsewhere, and every task appears
    exactly once. A failed task is a row with its parameters and an ``error`` column (listed
    in ``df.attrs["failed"]``), never dropped.
    """
    return frame(execute(grid, client, progress, workers))


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m nvstack.sweep",
        description="Run a grid file's sweep on a Dask cluster (or locally) and write sweep.csv, "
        "sweep.json, tables.txt and the figures, as `nvstack sim sweep --grid` does.",
    )
    ap.add_argument("grid", help="the grid file (TOML; docs/sim.md)")
    ap.add_argument("--output", required=True, help="folder for the files (created; files replaced)")
    ap.add_argument("--scheduler", help="a Dask scheduler's address (tcp://HOST:8786); default: this machine's cores")
    ap.add_argument("--no-progress", action="store_true")
    a = ap.parse_args(argv)
    try:
        client = None
        if a.scheduler:
            from distributed import Client

            client = Client(a.scheduler)
        run = execute(a.grid, client, progress=not a.no_progress)
    except _native.BadInput as e:
        print(f"nvstack.sweep: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"nvstack.sweep: {e}", file=sys.stderr)
        return 3
    if not run.complete:
        os.makedirs(a.output, exist_ok=True)
        df = frame(run)
        path = os.path.join(a.output, "failed.csv")
        df[df["error"].notna()].to_csv(path, index=False)
        for f in df.attrs["failed"]:
            print(f"nvstack.sweep: failed: {f}", file=sys.stderr)
        print(f"nvstack.sweep: {len(run.errors)} of {len(run.params)} runs failed; listed in {path}", file=sys.stderr)
        return 1
    files = _native.write_sweep(run.text, run.file, run.folder, run.ordered(), a.output, run.seconds)
    print(
        f"sweep: {len(run.params)} tasks in {run.seconds:.1f} s; wrote {len(files)} files in {a.output}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
