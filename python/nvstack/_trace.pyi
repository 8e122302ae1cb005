import os
from typing import Dict, Iterator, Optional, Union

import numpy as np

from ._common import Result

class Trace:
    """A block trace in any format the CLI reads, streamed."""
    path: str
    format: str
    block_size: int
    skip_bad_lines: bool
    interarrival_us: Optional[int]
    def __init__(
        self,
        path: Union[str, os.PathLike[str]],
        format: str,
        block_size: int = 4096,
        skip_bad_lines: bool = False,
        interarrival_us: Optional[int] = None,
    ) -> None: ...
    def stat(self) -> Result:
        """``nvstack sim stat --json``."""
    def chunks(self, size: int = 65536) -> Iterator[Dict[str, np.ndarray]]:
        """Block accesses as NumPy columns: time_ns, key (uint64), is_write, sync (bool)."""
    def __iter__(self) -> Iterator[Dict[str, np.ndarray]]: ...
