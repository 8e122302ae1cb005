#!/usr/bin/env python3
"""libCacheSim's LRU over a block-level trace written by `nvstack sim blocks`; prints JSON.

Used by tests/sim_libcachesim.rs (exact miss counts) and scripts/bench-sim.sh (timing). Run with
a Python that has the `libcachesim` package (PyPI), e.g. target/venv-libcachesim/bin/python.

    libcachesim_lru.py --trace FILE [--trace-format oracle-general|csv]
                       --cache-bytes N[,N...] [--runs R] [--exact] [--check-next-access]

For each cache size it builds `libcachesim.LRU(cache_size=N)` (bytes; consider_obj_metadata
False, so an object takes exactly its obj_size bytes, the block size) and replays the whole trace
with `process_trace`, libCacheSim's C++ loop (`cache.get` per request: a hit updates recency, a
miss inserts after evicting least recently used objects until it fits; the request's op is never
looked at, so reads and writes are both plain accesses). `process_trace` returns only the miss
ratio, 1 - hits/requests as a double; the miss count is recovered as round(ratio * requests),
which is exact for any count below 2^52. With --exact the script also replays the trace in
Python, calling `cache.get` on a fresh cache per request and counting misses as integers, and
fails (exit 1) if the two counts differ.

With --check-next-access (oracle-general) it also checks every record's next_access_vtime
(the 1-based index of the next access to the same block, -1 if none) and that libCacheSim's
Belady, which reads that field, misses exactly as often as an optimal replacement computed here
from the obj_ids alone ("belady": [{"cache_bytes", "belady_misses", "opt_misses"}]).

Output: {"libcachesim_version", "trace", "trace_format", "requests", "results": [{"cache_bytes",
"misses", "misses_exact" (with --exact), "miss_ratio", "process_trace_s": [R timings]}]}.
"process_trace_s" times the process_trace call alone (reading the mmap'ed trace records and
simulating), with perf_counter, once per run on a fresh cache; a whole-process time includes
starting Python, importing libcachesim and opening the trace besides.
"""

import argparse
import json
import sys
import time

try:
    import libcachesim as lcs
except ImportError as e:  # the Rust test checks for this before running the script
    print(f"libcachesim not installed: {e}", file=sys.stderr)
    sys.exit(3)


def open_reader(path, fmt):
    if fmt == "oracle-general":
        return lcs.TraceReader(
            path,
            lcs.TraceType.ORACLE_GENERAL_TRACE,
            lcs.ReaderInitParam(ignore_obj_size=False),
        )
    p = lcs.ReaderInitParam(
        has_header=True,
        has_header_set=True,
        delimiter=",",
        obj_id_is_num=True,
        obj_id_is_num_set=True,
        ignore_obj_size=False,
    )
    # Field numbers are 1-based: time,obj_id,obj_size,op.
    p.time_field = 1
    p.obj_id_field = 2
    p.obj_size_field = 3
    p.op_field = 4
    return lcs.TraceReader(path, lcs.TraceType.CSV_TRACE, p)


def new_lru(cache_bytes):
    return lcs.LRU(cache_size=cache_bytes, consider_obj_metadata=False)


def exact_misses(reader, cache_bytes):
    cache = new_lru(cache_bytes)
    n = misses = 0
    for req in reader:
        n += 1
        if not cache.get(req):
            misses += 1
    return n, misses


def check_next_access(path, sizes):
    """oracle-general only: every record's next_access_vtime must be the 1-based index of the
    next record with the same obj_id (-1 if none), as libCacheSim's traceConv writes it; and
    libCacheSim's Belady, which reads that field, must miss exactly as often as an optimal
    (farthest next use) replacement computed here from the obj_ids alone. Returns
    ([problems], [{"cache_bytes", "belady_misses", "opt_misses"}])."""
    import heapq
    import struct

    data = open(path, "rb").read()
    if len(data) % 24:
        return [f"{path}: {len(data)} bytes is not a whole number of 24-byte records"], []
    recs = list(struct.iter_unpack("<IQIq", data))
    n = len(recs)
    never = n + 1
    nxt = [0] * n
    last = {}
    for i in range(n - 1, -1, -1):
        k = recs[i][1]
        nxt[i] = last.get(k, never)
        last[k] = i
    problems = []
    for i, r in enumerate(recs):
        want = -1 if nxt[i] == never else nxt[i] + 1
        if r[3] != want:
            problems.append(f"record {i}: next_access_vtime {r[3]}, expected {want}")
            break
    out = []
    for size in sizes:
        obj = recs[0][2] if recs else 1
        cap = size // obj
        held, heap, opt = {}, [], 0
        for i, r in enumerate(recs):
            k = r[1]
            if k not in held:
                opt += 1
                if len(held) >= cap:
                    while True:
                        neg, kk = heapq.heappop(heap)
                        if held.get(kk) == -neg:
                            del held[kk]
                            break
            held[k] = nxt[i]
            heapq.heappush(heap, (-nxt[i], k))
        ratio, _ = lcs.Belady(cache_size=size).process_trace(open_reader(path, "oracle-general"))
        belady = round(ratio * n)
        out.append({"cache_bytes": size, "belady_misses": belady, "opt_misses": opt})
        if belady != opt:
            problems.append(f"cache {size}: libCacheSim Belady {belady} misses, optimal {opt}")
    return problems, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True)
    ap.add_argument("--trace-format", choices=["oracle-general", "csv"], default="oracle-general")
    ap.add_argument("--cache-bytes", required=True)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--check-next-access", action="store_true")
    a = ap.parse_args()
    try:
        sizes = [int(s) for s in a.cache_bytes.split(",")]
    except ValueError:
        print(f"--cache-bytes {a.cache_bytes!r}: expected byte counts separated by commas", file=sys.stderr)
        return 2
    if a.runs < 1 or any(s <= 0 for s in sizes):
        print("--runs and --cache-bytes must be positive", file=sys.stderr)
        return 2
    reader = open_reader(a.trace, a.trace_format)
    requests = reader.get_num_of_req()
    results = []
    status = 0
    for size in sizes:
        timings = []
        ratio = None
        for _ in range(a.runs):
            cache = new_lru(size)
            t0 = time.perf_counter()
            ratio, _byte_ratio = cache.process_trace(reader)
            timings.append(time.perf_counter() - t0)
        r = {
            "cache_bytes": size,
            "misses": round(ratio * requests),
            "miss_ratio": ratio,
            "process_trace_s": timings,
        }
        if a.exact:
            n, m = exact_misses(reader, size)
            r["misses_exact"] = m
            if n != requests or m != r["misses"]:
                print(
                    f"cache {size}: process_trace says {r['misses']} misses of {requests}, "
                    f"the Python loop {m} of {n}",
                    file=sys.stderr,
                )
                status = 1
        results.append(r)
    extra = {}
    if a.check_next_access:
        if a.trace_format != "oracle-general":
            print("--check-next-access needs --trace-format oracle-general", file=sys.stderr)
            return 2
        problems, extra["belady"] = check_next_access(a.trace, sizes)
        for p in problems:
            print(p, file=sys.stderr)
            status = 1
    print(
        json.dumps(
            {
                **extra,
                "libcachesim_version": getattr(lcs, "__version__", "unknown"),
                "trace": a.trace,
                "trace_format": a.trace_format,
                "requests": requests,
                "results": results,
            }
        )
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
