"""Every binding against the program's --json on the shared traces: the same numbers."""

import json
import subprocess

import numpy as np
import pytest

import nvstack


def cli(nvstack_bin, *args):
    out = subprocess.run([nvstack_bin, *map(str, args), "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def tpcc(shared):
    return nvstack.Trace(shared / "tpcc-small.trace", format="disksim")


@pytest.fixture(scope="module")
def cloud(shared):
    return nvstack.Trace(shared / "cloudPhysicsIO.csv", format="cloudphysics")


def targs(t):
    return ["--trace", t.path, "--format", t.format]


def test_stat_equals_the_cli(nvstack_bin, tpcc, cloud):
    for t in (tpcc, cloud):
        assert t.stat().to_dict() == cli(nvstack_bin, "sim", "stat", *targs(t))
    assert cloud.stat().block_accesses == 1141869


def test_chunks_are_the_block_accesses(tpcc):
    keys, writes, n_chunks = [], 0, 0
    for c in tpcc.chunks(4096):
        assert set(c) == {"time_ns", "key", "is_write", "sync"}
        assert c["key"].dtype == np.uint64 and c["is_write"].dtype == bool
        assert len(c["key"]) <= 4096 and np.all(np.diff(c["time_ns"].astype(np.int64)) >= 0)
        keys.append(c["key"])
        writes += int(c["is_write"].sum())
        n_chunks += 1
    st = tpcc.stat()
    k = np.concatenate(keys)
    assert (len(k), writes, len(np.unique(k))) == (st.block_accesses, st.writes, st.distinct_blocks)
    assert n_chunks == -(-st.block_accesses // 4096)


@pytest.mark.parametrize(
    "kw,flags",
    [
        (dict(model="volatile", volatile="8MiB"), ["--model", "volatile", "--volatile", "8MiB", "--nvram", "0"]),
        (
            dict(model="volatile", volatile="8MiB", delayed_writeback="off"),
            ["--model", "volatile", "--volatile", "8MiB", "--nvram", "0", "--delayed-writeback", "off"],
        ),
        (
            dict(model="unified", policy="random", seed=3, volatile="8MiB", nvram="1MiB"),
            ["--model", "unified", "--policy", "random", "--seed", "3", "--volatile", "8MiB", "--nvram", "1MiB"],
        ),
        (
            dict(model="write-aside", policy="omniscient", volatile=8 << 20, nvram=1 << 20),
            ["--model", "write-aside", "--policy", "omniscient", "--volatile", "8MiB", "--nvram", "1MiB"],
        ),
    ],
)
def test_cache_equals_the_cli(nvstack_bin, cloud, kw, flags):
    r = nvstack.sim.cache(cloud, **kw)
    assert r.to_dict() == cli(nvstack_bin, "sim", "cache", *targs(cloud), *flags)
    df = r.to_pandas()
    assert list(df.columns) == list(r.to_dict()) and len(df) == 1


def test_lfs_equals_the_cli(nvstack_bin, cloud, tpcc):
    for t in (cloud, tpcc):
        r = nvstack.sim.lfs(t, fsync_every=10)
        assert r.to_dict() == cli(nvstack_bin, "sim", "lfs", *targs(t), "--fsync-every", 10)
        assert "with_buffer_disk_writes" in r.to_pandas().columns


def test_analyses_equal_the_cli(nvstack_bin, tpcc):
    t = tpcc
    assert nvstack.sim.lifetimes(t).to_dict() == cli(nvstack_bin, "sim", "lifetimes", *targs(t))
    assert len(nvstack.sim.lifetimes(t).to_pandas()) == 12
    nv = ["0", "64KiB", "1MiB"]
    pairs = [
        (nvstack.sim.nvram_size(t, nvram=nv, progress=False), ["nvram-size", "--nvram", "0,64KiB,1MiB"]),
        (
            nvstack.sim.policies(t, nvram=nv, seeds=2, progress=False),
            ["policies", "--nvram", "0,64KiB,1MiB", "--seeds", 2],
        ),
        (nvstack.sim.models(t, added=nv, progress=False), ["models", "--added", "0,64KiB,1MiB"]),
        (nvstack.sim.bus(t, progress=False), ["bus"]),
    ]
    fate = nvstack.sim.fate(t, nvram=["128KiB", "1MiB"], policy="omniscient", progress=False)
    want = cli(nvstack_bin, "sim", "fate", *targs(t), "--nvram", "128KiB,1MiB", "--policy", "omniscient")
    assert fate.to_dict() == want and len(fate.to_pandas()) == 3
    for points, args in pairs:
        want = cli(nvstack_bin, "sim", args[0], *targs(t), *args[1:])
        assert [p.to_dict() for p in points] == want, args[0]
        assert len(points.to_pandas()) == len(want)


def test_bad_input_raises_clear_exceptions(tmp_path, tpcc):
    with pytest.raises(nvstack.BadInput, match=r"model 'lru': unknown \(valid: volatile, write-aside, unified\)"):
        nvstack.sim.cache(tpcc, model="lru", volatile="8MiB")
    with pytest.raises(nvstack.BadInput, match=r"policy 'fifo': unknown \(valid: lru"):
        nvstack.sim.cache(tpcc, model="unified", policy="fifo", volatile="8MiB", nvram="1MiB")
    with pytest.raises(nvstack.BadInput, match="nvram 1000: not a multiple of the block size"):
        nvstack.sim.cache(tpcc, model="unified", volatile="8MiB", nvram=1000)
    with pytest.raises(nvstack.BadInput, match="bad size '8MB'"):
        nvstack.sim.cache(tpcc, model="unified", volatile="8MB", nvram=0)
    with pytest.raises(nvstack.BadInput, match="only model='volatile' takes it"):
        nvstack.sim.cache(tpcc, model="unified", volatile="8MiB", nvram="1MiB", delayed_writeback=30)
    with pytest.raises(ValueError, match=r"format 'csv': unknown \(valid: cloudphysics"):
        nvstack.Trace(tpcc.path, format="csv")
    with pytest.raises(nvstack.BadInput, match="block_size 1000"):
        nvstack.Trace(tpcc.path, format="disksim", block_size=1000)
    with pytest.raises(nvstack.BadInput, match="none.trace: cannot open the trace"):
        nvstack.Trace(tmp_path / "none.trace", format="disksim")
    bad = tmp_path / "bad.trace"
    bad.write_text("0 0 0 8 0\n1000 0 8 8 0\n2000 0 x 8 1\n")
    t = nvstack.Trace(bad, format="disksim")
    with pytest.raises(nvstack.BadInput, match=rf"{bad}:3: field 'lsa' is 'x'"):
        list(t.chunks())
    with pytest.raises(nvstack.BadInput, match="bad.trace:3: "):
        nvstack.sim.cache(t, model="volatile", volatile="8MiB")
    skipped = nvstack.Trace(bad, format="disksim", skip_bad_lines=True).stat()
    assert skipped.skipped_lines == 1


def test_progress_reaches_python_through_the_workspace_callback(tpcc, capsys):
    calls = []

    class Recorder:
        def start(self, label, total):
            calls.append(("start", label, total))

        def advance(self, n):
            calls.append(("advance", n))

        def finish(self):
            calls.append(("finish",))

    nvstack._native.analysis_run(tpcc.path, "disksim", 4096, False, None, "nvram-size", "unified", [], [0, 65536], 1, Recorder())
    assert calls[0] == ("start", "nvram-size", 2) and calls[-1] == ("finish",)
    assert sum(c[1] for c in calls if c[0] == "advance") == 2
    # The package draws it as a tqdm bar on stderr.
    nvstack.sim.nvram_size(tpcc, nvram=[0, "64KiB"], progress=True)
    err = capsys.readouterr().err
    assert "nvram-size" in err and "2/2" in err, err
