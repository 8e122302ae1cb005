"""Where the tests find the program and the shared traces (scripts/test.sh sets both)."""

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def nvstack_bin() -> str:
    b = os.environ.get("NVSTACK_BIN", str(ROOT / "target/release/nvstack"))
    assert os.access(b, os.X_OK), f"{b}: build the program first (cargo build --release)"
    return b


@pytest.fixture(scope="session")
def shared() -> pathlib.Path:
    d = pathlib.Path(os.environ.get("NVSTACK_SHARED_TRACES", str(ROOT / "../shared/traces")))
    for name in ("cloudPhysicsIO.csv", "tpcc-small.trace"):
        assert (d / name).is_file(), f"{d / name} is missing: the real traces must be there"
    return d
