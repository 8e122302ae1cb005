"""SQLite with its WAL on NVRAM: the nvstack VFS against SQLite's default VFS.

Run by scripts/bench-sqlite.sh with Debian's /usr/bin/python3 (its sqlite3 module can load
extensions). One process, so one libsqlite3, times N single-row transactions (WAL,
synchronous=FULL, autocommit INSERTs of a 100-byte blob) for three rows:

  default-disk  the default VFS, database and WAL on the machine's disk (durable)
  nvstack       the nvstack VFS, database on the same disk directory, WAL on an emulated
                NVRAM region under /dev/shm (durable: each WAL write is an atomic nvramdisk
                write, durable when it returns)
  default-shm   the default VFS, database and WAL on /dev/shm (not durable: the ceiling)

Each row runs --runs times (the disk row --disk-runs times, it is slow), interleaved, each on a
fresh database; the table gives the medians and the ratios. --json prints one JSON document
on stdout (progress goes to stderr).
"""

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time


def fs_type(path):
    """The file system type of the mount holding `path` (from /proc/mounts)."""
    path = os.path.realpath(path)
    best, kind = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            mnt, typ = parts[1], parts[2]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, typ
    return kind


def libsqlite_path():
    with open("/proc/self/maps") as f:
        for line in f:
            if "libsqlite3" in line:
                return line.split()[-1]
    return "?"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run_one(uri, is_uri, txns, loader=None):
    c = sqlite3.connect(uri, uri=is_uri, isolation_level=None)
    mode = c.execute("pragma journal_mode=wal").fetchone()[0]
    assert mode == "wal", mode
    c.execute("pragma synchronous=full")
    c.execute("create table t(id integer primary key, v blob)")
    blob = b"x" * 100
    ins = "insert into t(v) values(?)"
    t0 = time.perf_counter()
    for _ in range(txns):
        c.execute(ins, (blob,))
    dt = time.perf_counter() - t0
    n = c.execute("select count(*) from t").fetchone()[0]
    assert n == txns, (n, txns)
    stats = None
    if loader is not None:
        stats = json.loads(loader.execute("select nvstack_stats()").fetchone()[0])
    c.close()
    return txns / dt, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ext", required=True, help="path of libnvstack_sqlite.so")
    ap.add_argument("--txns", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3, help="runs of the nvstack and shm rows")
    ap.add_argument("--disk-runs", type=int, default=1, help="runs of the disk row")
    ap.add_argument("--disk-dir", default="/var/tmp", help="a directory on the machine's disk")
    ap.add_argument("--shm-dir", default="/dev/shm")
    ap.add_argument("--region-size", default="64MiB")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    for name, v in (("--txns", a.txns), ("--runs", a.runs), ("--disk-runs", a.disk_runs)):
        if v < 1:
            ap.error(f"{name} must be at least 1")
    disk_fs, shm_fs = fs_type(a.disk_dir), fs_type(a.shm_dir)
    if disk_fs in ("tmpfs", "ramfs"):
        ap.error(f"--disk-dir {a.disk_dir} is on {disk_fs}, not a disk: pick another")
    if shm_fs != "tmpfs":
        ap.error(f"--shm-dir {a.shm_dir} is on {shm_fs}, not tmpfs")

    loader = sqlite3.connect(":memory:")
    loader.enable_load_extension(True)
    loader.load_extension(a.ext)

    results = {"default-disk": [], "nvstack": [], "default-shm": []}
    stats = None
    for r in range(max(a.runs, a.disk_runs)):
        disk = tempfile.mkdtemp(prefix="nvstack-bench-", dir=a.disk_dir)
        shm = tempfile.mkdtemp(prefix="nvstack-bench-", dir=a.shm_dir)
        try:
            if r < a.disk_runs:
                log(f"run {r + 1}: default VFS on {a.disk_dir} ({disk_fs}) ...")
                tps, _ = run_one(os.path.join(disk, "disk.db"), False, a.txns)
                results["default-disk"].append(tps)
            if r < a.runs:
                log(f"run {r + 1}: nvstack VFS (database on {a.disk_dir}, WAL on {a.shm_dir}) ...")
                region = os.path.join(shm, "region.img")
                uri = (f"file:{os.path.join(disk, 'nv.db')}?vfs=nvstack"
                       f"&region={region}&region_size={a.region_size}")
                tps, stats = run_one(uri, True, a.txns, loader)
                results["nvstack"].append(tps)
                leftovers = [f for f in os.listdir(disk) if "-wal" in f or "-journal" in f]
                assert not leftovers, leftovers
                log(f"run {r + 1}: default VFS on {a.shm_dir} (tmpfs) ...")
                tps, _ = run_one(os.path.join(shm, "shm.db"), False, a.txns)
                results["default-shm"].append(tps)
        finally:
            shutil.rmtree(disk, ignore_errors=True)
            shutil.rmtree(shm, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in results.items()}
    doc = {
        "sqlite_version": sqlite3.sqlite_version,
        "libsqlite3": libsqlite_path(),
        "txns": a.txns,
        "runs": a.runs,
        "disk_runs": a.disk_runs,
        "disk_dir": a.disk_dir,
        "disk_fs": disk_fs,
        "shm_dir": a.shm_dir,
        "region_size": a.region_size,
        "txn_per_s": med,
        "all_runs": results,
        "nvstack_vs_default_disk": med["nvstack"] / med["default-disk"],
        "nvstack_vs_default_shm": med["nvstack"] / med["default-shm"],
        "targets": {"nvstack_vs_default_disk": 10.0, "nvstack_vs_default_shm": 0.7},
        "nvstack_store_stats": stats[0]["stats"] if stats else None,
    }
    if a.json:
        print(json.dumps(doc, indent=2))
        return
    print(f"SQLite {doc['sqlite_version']} ({doc['libsqlite3']}), {a.txns} single-row "
          f"transactions, WAL, synchronous=FULL; medians of {a.runs} runs "
          f"({a.disk_runs} for the disk row)")
    rows = [
        ("default-disk", f"{a.disk_dir} ({disk_fs})", f"{a.disk_dir} ({disk_fs})"),
        ("nvstack", f"{a.disk_dir} ({disk_fs})", f"region in {a.shm_dir}"),
        ("default-shm", f"{a.shm_dir} (tmpfs)", f"{a.shm_dir} (tmpfs)"),
    ]
    print(f"{'row':<14}{'database':<22}{'WAL':<22}{'txn/s':>10}{'vs disk':>10}{'vs shm':>9}")
    for name, where_db, where_wal in rows:
        t = med[name]
        print(f"{name:<14}{where_db:<22}{where_wal:<22}{t:>10,.0f}"
              f"{t / med['default-disk']:>9.1f}x{t / med['default-shm']:>8.2f}x")
    ok_disk = doc["nvstack_vs_default_disk"] >= 10
    ok_shm = doc["nvstack_vs_default_shm"] >= 0.7
    print(f"targets: nvstack >= 10x default-disk: {'met' if ok_disk else 'NOT met'} "
          f"({doc['nvstack_vs_default_disk']:.1f}x); nvstack >= 0.7x default-shm: "
          f"{'met' if ok_shm else 'NOT met'} ({doc['nvstack_vs_default_shm']:.2f}x)")
    s = doc["nvstack_store_stats"]
    if s:
        print(f"nvstack store: {s['writes']} writes, {s['device_writes']} atomic device writes, "
              f"{s['dir_writes']} with the directory, {s['rmw_blocks']} partial blocks patched "
              f"({s['cached_blocks']} from the cache)")


if __name__ == "__main__":
    main()
