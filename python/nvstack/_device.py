"""The device: ``nvstack.Device``, an nvramdisk image (``nvstack format|write|read|discard|check``)."""

from __future__ import annotations

import os
from typing import Optional, Union

from . import _native
from ._common import Result, size


class Device:
    """An nvramdisk image, opened (recovery runs at every open).

    ``Device.format(path, size)`` makes one (``force=True`` to replace an existing file),
    ``Device.open(path)`` opens one. ``read(lba, count)`` returns bytes; ``write(lba, data)``
    writes whole blocks, at most ``atomic_blocks`` of them, all-or-nothing across a crash and
    durable on return; ``discard(lba, count)``. An out-of-range LBA raises
    :class:`nvstack.BadInput` naming the device's size. ``check()`` closes the device and runs
    the offline checker (``nvstack check --json``).
    """

    def __init__(self, native: "_native.Device"):
        self._dev: Optional[_native.Device] = native
        self.path = native.path

    @classmethod
    def format(
        cls,
        path: Union[str, os.PathLike],
        size_bytes: Union[int, str],
        block_size: int = 4096,
        lanes: Optional[int] = None,
        protocol: str = "fast",
        force: bool = False,
    ) -> "Device":
        return cls(_native.Device.format(os.fspath(path), size(size_bytes, "size"), block_size, lanes, protocol, force))

    @classmethod
    def open(cls, path: Union[str, os.PathLike]) -> "Device":
        return cls(_native.Device.open(os.fspath(path)))

    def _d(self) -> "_native.Device":
        if self._dev is None:
            raise _native.BadInput(f"{self.path}: the device is closed")
        return self._dev

    @property
    def block_size(self) -> int:
        return self._d().block_size

    @property
    def blocks(self) -> int:
        return self._d().blocks

    @property
    def atomic_blocks(self) -> int:
        return self._d().atomic_blocks

    def read(self, lba: int, count: int = 1) -> bytes:
        return self._d().read(lba, count)

    def write(self, lba: int, data: bytes) -> None:
        self._d().write(lba, bytes(data))

    def discard(self, lba: int, count: int = 1) -> None:
        self._d().discard(lba, count)

    def close(self) -> None:
        self._dev = None

    def check(self) -> Result:
        """Close the device and check its image offline: ``nvstack check --json``."""
        self.close()
        return Result.from_json(_native.Device.check_image(self.path))

    def __enter__(self) -> "Device":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
