"""Pieces the package's modules share: results, sizes and the progress bar."""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping

from . import _native


def size(value: int | str, name: str) -> int:
    """A size argument: bytes (int) or text with a KiB, MiB or GiB suffix ("8MiB")."""
    if isinstance(value, bool):
        raise _native.BadInput(f"{name}: expected a size, not {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise _native.BadInput(f"{name} {value}: must not be negative")
        return value
    if isinstance(value, str):
        try:
            return _native.parse_size(value)
        except _native.BadInput as e:
            raise _native.BadInput(f"{name}: {e}") from None
    raise _native.BadInput(f"{name}: expected a size (int or text such as '8MiB'), not {type(value).__name__}")


def sizes(values: Any, name: str) -> list[int] | None:
    """A list of sizes, or None for the default grid."""
    if values is None:
        return None
    if isinstance(values, (int, str)):
        values = [values]
    return [size(v, name) for v in values]


class Result(Mapping[str, Any]):
    """A result with the fields of the CLI's ``--json`` object.

    Fields read as items (``r["misses"]``) or attributes (``r.misses``); ``to_dict()`` gives
    the JSON object and ``to_pandas()`` a one-row DataFrame (nested objects flattened with
    ``_``, as in ``sweep.csv``).
    """

    def __init__(self, data: dict[str, Any]):
        self._data = data

    @classmethod
    def from_json(cls, text: str) -> "Result":
        return cls(json.loads(text))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(f"no field {name!r} (fields: {', '.join(self._data)})") from None

    def __repr__(self) -> str:
        return f"Result({self._data!r})"

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, as the CLI's ``--json`` prints it."""
        return json.loads(json.dumps(self._data))

    def to_pandas(self):
        """One row; nested objects flattened with ``_`` (``with_buffer_disk_writes``)."""
        import pandas as pd

        return pd.json_normalize(self._data, sep="_")


class Points(list):
    """The cache runs of an analysis: a list of :class:`Result`, one per run, as the CLI's
    ``--json`` array; ``to_pandas()`` gives a row per run."""

    def to_pandas(self):
        import pandas as pd

        return pd.json_normalize([p.to_dict() for p in self], sep="_")


class Lifetimes(Result):
    """Figure 2: per-delay lists (``delays_ns``, ``died_within``, ...) beside trace-wide
    counts; ``to_pandas()`` gives a row per delay, as ``sweep.csv``'s ``lifetime`` rows."""

    def to_pandas(self):
        import pandas as pd

        per_delay = ["delays_ns", "died_within", "flushed", "remaining", "net_write_traffic"]
        n = len(self._data["delays_ns"])
        rows = []
        for i in range(n):
            row = {k: v for k, v in self._data.items() if k not in per_delay}
            row["delay_ns"] = self._data["delays_ns"][i]
            for k in per_delay[1:]:
                row[k] = self._data[k][i]
            rows.append(row)
        return pd.DataFrame(rows)


class Bar:
    """The workspace's progress callback (start, advance, finish) drawn as a tqdm bar."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._bar = None

    def start(self, label: str, total: int) -> None:
        if not self.enabled:
            return
        from tqdm.auto import tqdm

        self.finish()
        self._bar = tqdm(total=total or None, desc=label, unit="run")

    def advance(self, steps: int) -> None:
        if self._bar is not None:
            self._bar.update(steps)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
