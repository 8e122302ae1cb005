"""The device binding: round trips, atomic unit, refusals, and the CLI's view of the image."""

import json
import os
import subprocess
import tempfile

import pytest

import nvstack


@pytest.fixture
def image():
    # An image in /dev/shm (the emulated NVRAM), a mktemp name, removed after the test.
    fd, path = tempfile.mkstemp(prefix="nvstack-py-", suffix=".img", dir="/dev/shm")
    os.close(fd)
    os.unlink(path)
    yield path
    if os.path.exists(path):
        os.unlink(path)


def test_device_round_trips_and_the_cli_reads_what_python_wrote(image, nvstack_bin):
    d = nvstack.Device.format(image, "16MiB")
    b = d.block_size
    assert b == 4096 and d.blocks > 0 and d.atomic_blocks >= 2
    data = bytes(range(256)) * (2 * b // 256)
    d.write(7, data)
    assert d.read(7, 2) == data
    d.discard(7, 1)
    assert d.read(7, 2) == bytes(b) + data[b:]
    blocks = d.blocks
    report = d.check()
    assert report.consistent, report
    cli = subprocess.run([nvstack_bin, "check", image, "--json"], capture_output=True, text=True)
    assert cli.returncode == 0, cli.stderr
    assert report.to_dict() == json.loads(cli.stdout)
    out = subprocess.run([nvstack_bin, "read", image, "--lba", "8", "--count", "1"], capture_output=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout == data[b:]
    d2 = nvstack.Device.open(image)
    assert d2.blocks == blocks and d2.read(8, 1) == data[b:]


def test_device_refuses_bad_input(image):
    with nvstack.Device.format(image, "16MiB") as d:
        n, b = d.blocks, d.block_size
        with pytest.raises(nvstack.BadInput, match=rf"read of 1 blocks at LBA {n} is out of range: the device has {n} blocks"):
            d.read(n, 1)
        with pytest.raises(nvstack.BadInput, match="out of range"):
            d.write(n - 1, bytes(2 * b))
        with pytest.raises(nvstack.BadInput, match="out of range"):
            d.discard(2**63, 2**63)
        with pytest.raises(nvstack.BadInput, match="not a positive multiple of the block size"):
            d.write(0, b"x" * 100)
        with pytest.raises(nvstack.BadInput, match="one atomic write takes at most"):
            d.write(0, bytes((d.atomic_blocks + 1) * b))
        with pytest.raises(nvstack.BadInput, match="0 blocks"):
            d.read(0, 0)
        with pytest.raises(OverflowError):
            d.read(-1, 1)
    with pytest.raises(nvstack.BadInput, match="closed"):
        d.read(0, 1)
    # An existing file is not overwritten without force.
    with pytest.raises(nvstack.BadInput):
        nvstack.Device.format(image, "16MiB")
    nvstack.Device.format(image, "16MiB", force=True).close()
    with pytest.raises(nvstack.BadInput, match="bad size"):
        nvstack.Device.format(image, "16MB", force=True)
