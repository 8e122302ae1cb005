"""Sweeps: locally, on a 2-process LocalCluster, with a worker killed mid-sweep, against
`nvstack sim sweep --grid`; failed points reported, never dropped; bad grids refused."""

import os
import signal
import subprocess
import sys

import pytest

import nvstack
from nvstack import sweep as sweep_fn
from nvstack.sweep import execute, frame

distributed = pytest.importorskip("distributed")


def grid_file(tmp_path, shared, nvram='["0", "1MiB"]', seeds=1, traces=None):
    traces = traces or [
        (shared / "cloudPhysicsIO.csv", "cloudphysics"),
        (shared / "tpcc-small.trace", "disksim"),
    ]
    text = f"nvram = {nvram}\nseeds = {seeds}\n"
    for path, fmt in traces:
        text += f'[[trace]]\npath = "{path}"\nformat = "{fmt}"\n'
    g = tmp_path / "grid.toml"
    g.write_text(text)
    return g


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        with Client(c) as client:
            yield client


@pytest.fixture(scope="module")
def cli_sweep(nvstack_bin, shared, tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    g = grid_file(d, shared)
    out = d / "out"
    r = subprocess.run([nvstack_bin, "sim", "sweep", "--grid", g, "--output", out], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return g, out


def test_local_sweep_gives_the_rows_of_the_cli(cli_sweep):
    g, out = cli_sweep
    df = sweep_fn(g, progress=False)
    assert df.attrs["csv"] == (out / "sweep.csv").read_text()
    assert list(df.columns) == (out / "sweep.csv").read_text().splitlines()[0].split(",")
    # A row per run: 2 traces x (20 cache runs) + 4 Figure 5 twins each, 12 lifetime delays, 4 LFS.
    assert len(df) == 2 * (20 + 4 + 12 + 4)
    assert set(df["kind"]) == {"cache", "lifetime", "lfs"}


def test_a_sweep_on_a_2_worker_cluster_gives_the_same_rows(cluster, cli_sweep):
    g, out = cli_sweep
    df = sweep_fn(g, client=cluster, progress=False)
    assert df.attrs["csv"] == (out / "sweep.csv").read_text()
    assert df.attrs["failed"] == []


def test_a_worker_killed_mid_sweep_still_gives_every_row_once(cluster, cli_sweep):
    g, out = cli_sweep
    pids = list(cluster.run(os.getpid).values())
    assert len(pids) == 2
    # nvstack.sweep is the function; the module of the same name is in sys.modules.
    sw = sys.modules["nvstack.sweep"]

    # Kill one worker process (SIGKILL) once the sweep is under way: after its first result.
    original = sw._record
    killed = []

    def record_then_kill(r, i, outcome):
        original(r, i, outcome)
        if not killed:
            os.kill(pids[0], signal.SIGKILL)
            killed.append(i)

    sw._record = record_then_kill
    try:
        r = execute(g, client=cluster, progress=False)
    finally:
        sw._record = original
    assert killed, "no worker was killed"
    assert r.complete, r.errors
    assert frame(r).attrs["csv"] == (out / "sweep.csv").read_text()
    assert sorted(r.results) == list(range(len(r.params)))


def test_python_m_nvstack_sweep_writes_the_cli_files(cluster, cli_sweep, tmp_path):
    g, out = cli_sweep
    addr = cluster.scheduler.address
    res = subprocess.run(
        [sys.executable, "-m", "nvstack.sweep", "--scheduler", addr, str(g), "--output", str(tmp_path / "py"), "--no-progress"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    names = sorted(os.listdir(out))
    assert sorted(os.listdir(tmp_path / "py")) == names
    for n in names:
        if n != "sweep.json":  # it records the wall time
            assert (tmp_path / "py" / n).read_bytes() == (out / n).read_bytes(), n


def test_a_failed_point_is_reported_with_its_parameters(tmp_path, shared):
    # A trace whose third line is bad: every task over it fails, the other trace's succeed.
    bad = tmp_path / "bad.trace"
    bad.write_text("0 0 0 8 0\n1000 0 8 8 0\n2000 0 x 8 1\n")
    g = grid_file(tmp_path, shared, traces=[(shared / "tpcc-small.trace", "disksim"), (bad, "disksim")])
    df = sweep_fn(g, progress=False)
    failed = df.attrs["failed"]
    assert len(failed) == 25  # 20 cache runs, 1 lifetime pass, 4 LFS comparisons
    assert all(f["trace"] == "bad.trace" and "bad.trace:3: " in f["error"] for f in failed)
    assert {f["kind"] for f in failed} == {"cache", "lifetime", "lfs"}
    rows = df[df["error"].notna()]
    assert len(rows) == 25 and set(rows["trace"]) == {"bad.trace"}
    assert len(df[df["error"].isna()]) == 20 + 12 + 4  # the good trace's own rows
    res = subprocess.run(
        [sys.executable, "-m", "nvstack.sweep", str(g), "--output", str(tmp_path / "o"), "--no-progress"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "25 of 50 runs failed" in res.stderr, res.stderr
    import pandas as pd

    listed = pd.read_csv(tmp_path / "o" / "failed.csv")
    assert len(listed) == 25 and set(listed["trace"]) == {"bad.trace"}


def test_a_bad_grid_is_refused_naming_file_key_and_fault(tmp_path, shared):
    g = grid_file(tmp_path, shared, nvram='["0", "1000"]')
    with pytest.raises(nvstack.BadInput, match=rf"{g}: key 'nvram': 1000: not a multiple"):
        sweep_fn(g, progress=False)
    g.write_text('seedz = 1\n[[trace]]\npath = "x"\nformat = "disksim"\n')
    with pytest.raises(nvstack.BadInput, match="key 'seedz': unknown key"):
        sweep_fn(g, progress=False)
    with pytest.raises(nvstack.BadInput, match="cannot read the grid"):
        sweep_fn(tmp_path / "none.toml")
    with pytest.raises(nvstack.BadInput, match="expected the path of a grid file"):
        sweep_fn({"nvram": [0]})
    res = subprocess.run([sys.executable, "-m", "nvstack.sweep", str(g), "--output", str(tmp_path / "o")], capture_output=True, text=True)
    assert res.returncode == 2 and "key 'seedz'" in res.stderr
