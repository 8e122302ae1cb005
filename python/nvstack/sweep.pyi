import os
from typing import Any, Dict, List, Optional, Union

import pandas

GridPath = Union[str, os.PathLike[str]]

class SweepRun:
    """A grid and what its tasks gave: results (JSON) and errors by task index."""
    text: str
    file: str
    folder: str
    params: List[Dict[str, str]]
    results: Dict[int, str]
    errors: Dict[int, str]
    seconds: float
    @property
    def complete(self) -> bool: ...
    def ordered(self) -> List[str]: ...

def load(grid: GridPath) -> SweepRun:
    """Read and check a grid file."""

def execute(grid: GridPath, client: Any = None, progress: bool = True, workers: Optional[int] = None) -> SweepRun:
    """Run every task of the grid; each ends in results or errors."""

def frame(run: SweepRun) -> pandas.DataFrame:
    """The rows of a sweep as one DataFrame."""

def sweep(grid: GridPath, client: Any = None, progress: bool = True, workers: Optional[int] = None) -> pandas.DataFrame:
    """Run a grid file's sweep; one DataFrame with a row per run."""

def main(argv: Optional[List[str]] = None) -> int: ...
