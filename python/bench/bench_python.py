"""scripts/bench-python.sh: the Python package against the CLI (medians of repeated runs, in a
rotated order after a warm-up), printed with ratios.

1. A whole cache run (volatile LRU, 256 MiB, dirty tracking with the 30 s cleaner) over
   cloudPhysicsIO: `nvstack sim cache` as a whole process against `nvstack.sim.cache` in a
   running interpreter.
   The same run against libCacheSim's Python package (`process_trace`, its C++ loop, LRU of
   256 MiB over the same block-level trace, written by `nvstack sim blocks`), when given.
2. The default grid (both shared traces) as a grid file: `nvstack sim sweep --grid`, the local
   Python sweep (threads), and a 2-worker LocalCluster (processes): the cost of distribution
   per task.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

import nvstack
from nvstack.sweep import execute


def median_of(fns, reps):
    times = {k: [] for k in fns}
    order = list(fns)
    for r in range(reps):
        for k in order[r % len(order):] + order[: r % len(order)]:
            times[k].append(fns[k]())
    return {k: statistics.median(v) for k, v in times.items()}, times


def main():
    nv_bin, shared, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    lcs_py, blocks = (sys.argv[4], sys.argv[5]) if len(sys.argv) > 5 else (None, None)
    cloud = os.path.join(shared, "cloudPhysicsIO.csv")
    tpcc = os.path.join(shared, "tpcc-small.trace")
    t = nvstack.Trace(cloud, format="cloudphysics")

    def cli_cache():
        s = time.perf_counter()
        subprocess.run(
            [nv_bin, "sim", "cache", "--trace", cloud, "--format", "cloudphysics", "--model", "volatile",
             "--volatile", "256MiB", "--nvram", "0", "--json"], check=True, capture_output=True)
        return time.perf_counter() - s

    def py_cache():
        s = time.perf_counter()
        nvstack.sim.cache(t, model="volatile", volatile="256MiB")
        return time.perf_counter() - s

    cli_cache(), py_cache()
    med, _ = median_of({"cli": cli_cache, "python": py_cache}, reps)
    n = t.stat().block_accesses
    print(f"cache run, cloudPhysicsIO ({n} block accesses), volatile LRU 256 MiB, medians of {reps}:")
    for k, v in med.items():
        print(f"  {k:8s} {v:.3f} s  {n / v / 1e6:.1f} M accesses/s  {v / med['cli']:.2f}x the CLI's time")

    if lcs_py:
        compare_libcachesim(lcs_py, blocks, med["python"], n, reps)

    from distributed import Client, LocalCluster

    with tempfile.TemporaryDirectory() as d:
        grid = os.path.join(d, "default.toml")
        with open(grid, "w") as f:
            f.write(f'[[trace]]\npath = "{cloud}"\nformat = "cloudphysics"\n'
                    f'[[trace]]\npath = "{tpcc}"\nformat = "disksim"\n')
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, Client(c) as client:
            def cli_sweep():
                s = time.perf_counter()
                subprocess.run([nv_bin, "sim", "sweep", "--grid", grid, "--output", os.path.join(d, "o")],
                               check=True, capture_output=True)
                return time.perf_counter() - s

            def local():
                r = execute(grid, progress=False)
                assert r.complete
                return r.seconds

            def dask2():
                r = execute(grid, client=client, progress=False)
                assert r.complete
                return r.seconds

            dask2()
            med, _ = median_of({"cli": cli_sweep, "local": local, "dask-2": dask2}, reps)
            tasks = len(execute(grid, progress=False).params)
    print(f"default grid as a grid file ({tasks} tasks), medians of {reps}:")
    for k, v in med.items():
        print(f"  {k:8s} {v:.2f} s  {v / tasks * 1000:.1f} ms per task  {v / med['cli']:.2f}x the CLI's time")
    # Two workers on 2 vCPUs do the CLI's work in parallel too: what they add over it per task
    # is the cost of distribution (scheduling, pickling, a result's trip back).
    per_task = (med["dask-2"] - med["local"]) / tasks
    print(f"  distribution cost: {per_task * 1000:.1f} ms per task over the local run")


def compare_libcachesim(lcs_py, blocks, py_s, n, reps):
    """libCacheSim's process_trace (its own timing of the call alone, median of `reps` runs on a
    fresh cache) against nvstack.sim.cache's median, on the same block accesses."""
    script = os.path.join(os.path.dirname(__file__), "..", "..", "crates", "cli", "tests", "libcachesim_lru.py")
    out = subprocess.run([lcs_py, script, "--trace", blocks, "--cache-bytes", str(256 << 20), "--runs", str(reps)],
                         check=True, capture_output=True, text=True).stdout
    import json
    r = json.loads(out)
    if r["requests"] != n:
        raise SystemExit(f"libCacheSim read {r['requests']} requests, nvstack {n} block accesses: not the same trace")
    lcs_s = statistics.median(r["results"][0]["process_trace_s"])
    print(f"  {'lcs':8s} {lcs_s:.3f} s  {n / lcs_s / 1e6:.1f} M accesses/s  (libCacheSim {r['libcachesim_version']} "
          f"process_trace, LRU, no dirty tracking)")
    print(f"  nvstack.sim.cache (dirty tracking on) runs at {lcs_s / py_s:.2f}x libCacheSim's rate")


if __name__ == "__main__":
    main()
