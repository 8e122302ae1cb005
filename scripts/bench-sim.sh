#!/usr/bin/env bash
# Simulator speed against libCacheSim (issue 6), in one run on one machine:
#   nvstack (dirty tracking)  target/release/nvstack sim cache --model volatile --policy lru
#                             --volatile 256MiB --nvram 0 (default 30 s delayed write-back)
#                             on ../shared/traces/cloudPhysicsIO.csv, whole process
#   nvstack (plain)           the same with --delayed-writeback off (a plain write-back LRU)
#   libCacheSim LRU           libcachesim.LRU(256 MiB) over the same block-level trace, written
#                             once (untimed) by `nvstack sim blocks` as oracleGeneral, whole
#                             process: start Python, import libcachesim, open the trace,
#                             process_trace, print (crates/cli/tests/libcachesim_lru.py)
#   libCacheSim process_trace the process_trace call alone, timed inside those same processes
# Every system runs --runs times (default 5) after one untimed warm-up, in an order rotated each
# round; the table shows the median seconds, block accesses per second, and the ratio to
# libCacheSim's whole-process and call-alone rates, and the miss counts (nvstack's plain LRU
# must equal libCacheSim's: a warning and exit status 1 if not). Targets: nvstack with dirty
# tracking at least 4 million block accesses/s and at least twice libCacheSim.
# Usage: scripts/bench-sim.sh [--runs N] [--json]
# Needs libcachesim: NVSTACK_LIBCACHESIM_PYTHON, else target/venv-libcachesim/bin/python (made
# by scripts/deps.sh). NVSTACK_BIN overrides the binary (and skips the release build).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=5 json=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs)
      [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "bench-sim: --runs needs a positive integer" >&2; exit 2; }
      runs=$2; shift 2 ;;
    --json) json=1; shift ;;
    *) echo "bench-sim: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
source scripts/deps.sh
py=${NVSTACK_LIBCACHESIM_PYTHON:-$PWD/target/venv-libcachesim/bin/python}
if ! "$py" -c 'import libcachesim' >/dev/null 2>&1; then
  echo "bench-sim: $py cannot import libcachesim (scripts/deps.sh makes target/venv-libcachesim, or set NVSTACK_LIBCACHESIM_PYTHON)" >&2
  exit 3
fi
trace=../shared/traces/cloudPhysicsIO.csv
[ -f "$trace" ] || { echo "bench-sim: $trace not found (the shared traces sit beside the checkout)" >&2; exit 3; }
if [ -n "${NVSTACK_BIN:-}" ]; then
  B=$NVSTACK_BIN
else
  cargo build --release --locked -q
  B=$PWD/target/release/nvstack
fi
work=$(mktemp -d /tmp/nvstack-bench-sim.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$B" sim blocks --trace "$trace" --format cloudphysics --output "$work/blocks.og" --json > "$work/blocks.json"

/usr/bin/python3 - "$B" "$py" "$trace" "$work/blocks.og" "$work/blocks.json" "$runs" "$json" <<'EOF'
import json, statistics, subprocess, sys, time

B, py, trace, blocks, blocks_json, runs, as_json = sys.argv[1:8]
runs, as_json = int(runs), as_json == "1"
cache_bytes = 256 << 20
accesses = json.load(open(blocks_json))["block_accesses"]
nv = [B, "sim", "cache", "--trace", trace, "--format", "cloudphysics", "--model", "volatile",
      "--policy", "lru", "--volatile", "256MiB", "--nvram", "0", "--json"]
cmds = {
    "dirty": nv,
    "plain": nv + ["--delayed-writeback", "off"],
    "lcs": [py, "crates/cli/tests/libcachesim_lru.py", "--trace", blocks, "--cache-bytes", str(cache_bytes)],
}

def run(name):
    t0 = time.perf_counter()
    p = subprocess.run(cmds[name], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.stderr.write(f"bench-sim: {' '.join(cmds[name])} failed ({p.returncode}):\n{p.stderr.decode()}")
        sys.exit(3)
    out = json.loads(p.stdout)
    if name == "lcs":
        r = out["results"][0]
        return dt, r["misses"], r["process_trace_s"][0], out["requests"]
    return dt, out["misses"], None, out["block_accesses"]

names = ["dirty", "plain", "lcs"]
for n in names:  # warm-up: page cache, CPU frequency
    run(n)
times = {n: [] for n in names}
call = []
misses = {}
counted = {}
for r in range(runs):
    for k in range(3):
        n = names[(k + r) % 3]
        dt, m, c, a = run(n)
        times[n].append(dt)
        misses.setdefault(n, set()).add(m)
        counted[n] = a
        if c is not None:
            call.append(c)

med = {n: statistics.median(t) for n, t in times.items()}
med["call"] = statistics.median(call)
rate = {n: accesses / s for n, s in med.items()}
one = lambda s: next(iter(s)) if len(s) == 1 else sorted(s)
m = {n: one(misses[n]) for n in names}
match = m["plain"] == m["lcs"] and m["dirty"] == m["plain"]
labels = {
    "dirty": "nvstack (dirty tracking)",
    "plain": "nvstack (plain)",
    "lcs": "libCacheSim LRU, whole process",
    "call": "libCacheSim LRU, process_trace call alone",
}
rows = []
for n in ["dirty", "plain", "lcs", "call"]:
    rows.append({
        "system": labels[n],
        "median_s": med[n],
        "times_s": times[n] if n != "call" else call,
        "block_accesses_per_s": rate[n],
        "ratio_to_libcachesim_process": rate[n] / rate["lcs"],
        "ratio_to_libcachesim_call": rate[n] / rate["call"],
        "misses": m["lcs" if n == "call" else n],
    })
targets = {
    "dirty_at_least_4M_per_s": rate["dirty"] >= 4e6,
    "dirty_at_least_2x_libcachesim_process": rate["dirty"] >= 2 * rate["lcs"],
    "dirty_at_least_2x_libcachesim_call": rate["dirty"] >= 2 * rate["call"],
}
for n in names:
    if counted[n] != accesses:
        sys.stderr.write(f"bench-sim: warning: {labels[n]} counted {counted[n]} block accesses, sim blocks wrote {accesses}\n")
        match = False
if not match:
    sys.stderr.write(f"bench-sim: WARNING: miss counts differ: {m}\n")
if as_json:
    print(json.dumps({
        "trace": trace, "cache_bytes": cache_bytes, "block_accesses": accesses, "runs": runs,
        "rows": rows, "misses_match": match, "targets": targets,
    }, indent=2))
else:
    print(f"trace {trace}: {accesses:,} block accesses (4 KiB), LRU of 256 MiB, median of {runs} runs")
    print(f"{'system':<44}{'median s':>10}{'accesses/s':>14}{'vs lcs process':>16}{'vs lcs call':>13}{'misses':>10}")
    for r in rows:
        print(f"{r['system']:<44}{r['median_s']:>10.3f}{r['block_accesses_per_s']:>14,.0f}"
              f"{r['ratio_to_libcachesim_process']:>16.2f}{r['ratio_to_libcachesim_call']:>13.2f}{str(r['misses']):>10}")
    print("whole process: from exec to exit, timed by the caller; call alone: perf_counter around "
          "process_trace (reads the mmap'ed oracleGeneral records and simulates) inside those processes")
    print(f"misses: {'match' if match else 'DIFFER'} (nvstack plain {m['plain']}, dirty {m['dirty']}, libCacheSim {m['lcs']})")
    ok = lambda b: "PASS" if b else "FAIL"
    print(f"target >= 4,000,000 accesses/s with dirty tracking: {ok(targets['dirty_at_least_4M_per_s'])}; "
          f">= 2x libCacheSim: {ok(targets['dirty_at_least_2x_libcachesim_process'])} (whole process), "
          f"{ok(targets['dirty_at_least_2x_libcachesim_call'])} (call alone)")
sys.exit(0 if match else 1)
EOF
