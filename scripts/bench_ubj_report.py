"""The tables and JSON of scripts/bench-ubj.sh (issue 20's evaluation).

Input: the run file the script writes, one line per measured run:
  phase commit_s autocommit_ms workload system round score app_bytes backing_bytes
  device_bytes nvram_bytes [fs_device_flushes]
(the flushes, the flush requests of the file system's device, are absent from runs of
versions before they were counted)
phase is "grid" (every row at each ext4 commit interval) or "autocommit" (row b alone at
each UBJ --autocommit-ms, ext4 commit=5 s). Medians over rounds; every ratio against row a
at the same commit interval, and row b against every row.
Usage: bench_ubj_report.py RESULTS JSON(0|1) ROUNDS SETTINGS
"""

import json
import statistics
import sys

ROWS = {
    "plain": ("a", "ext4 data=journal, plain file (direct-file)"),
    "ubj-jnl": ("b", "ext4 data=journal on UBJ"),
    "ubj-ord": ("c", "ext4 data=ordered on UBJ"),
    "extjnl": ("d", "ext4 data=journal, journal on nvramdisk"),
    "pagecache": ("e", "ext4 data=journal, mount -o loop"),
    "wcache": ("f", "ext4 data=journal on the write cache"),
}
UNITS = {"fio-rand": "MB/s", "fio-seq": "MB/s", "postmark": "tx/s"}


def cell(runs):
    """Medians of one (phase, commit, autocommit, workload, system) over its rounds."""
    app = [max(r["app"], 1) for r in runs]
    per = lambda k: statistics.median(r[k] / a for r, a in zip(runs, app))
    return {
        "median": statistics.median(r["score"] for r in runs),
        "runs": [r["score"] for r in runs],
        "backing_bytes_per_app_byte": round(per("backing"), 3),
        "device_bytes_per_app_byte": round(per("device"), 3),
        "nvram_bytes_per_app_byte": round(per("nvram"), 3),
        "fs_device_flushes": statistics.median(r["flushes"] for r in runs)
        if all(r["flushes"] is not None for r in runs) else None,
    }


def ratio(x, y):
    return round(x / y, 3) if x is not None and y else None


def load(path):
    keys = ["phase", "commit", "ac", "workload", "system", "round"]
    out = []
    for line in open(path):
        f = line.split()
        if len(f) not in (11, 12):
            sys.exit(f"bench-ubj: malformed result line: {line!r}")
        r = dict(zip(keys, f[:6]))
        r["commit"] = int(r["commit"])
        r["score"] = float(f[6])
        r["app"], r["backing"], r["device"], r["nvram"] = (int(x) for x in f[7:11])
        r["flushes"] = int(f[11]) if len(f) == 12 else None
        out.append(r)
    return out


def group(rows, phase):
    cells = {}
    for r in rows:
        if r["phase"] == phase:
            cells.setdefault((r["commit"], r["ac"], r["workload"], r["system"]), []).append(r)
    return {k: cell(v) for k, v in cells.items()}


def grid_results(g):
    out = []
    for (commit, _, w, s), c in sorted(g.items(), key=lambda kv: (kv[0][0], list(UNITS).index(kv[0][2]), list(ROWS).index(kv[0][3]))):
        a = g.get((commit, "default", w, "plain"))
        b = g.get((commit, "default", w, "ubj-jnl"))
        out.append({"commit_s": commit, "workload": w, "row": ROWS[s][0], "system": s,
                    "name": ROWS[s][1], "unit": UNITS[w], **c,
                    "vs_a": ratio(c["median"], a and a["median"]),
                    "b_vs_this": ratio(b and b["median"], c["median"])})
    return out


def summaries(grid):
    out = []
    for commit in sorted({r["commit_s"] for r in grid}):
        rs = [r for r in grid if r["commit_s"] == commit]
        b_a = {r["workload"]: r["vs_a"] for r in rs if r["row"] == "b" and r["vs_a"]}
        b_d = {r["workload"]: r["b_vs_this"] for r in rs if r["row"] == "d" and r["b_vs_this"]}
        s = {"commit_s": commit, "b_vs_a": b_a, "b_vs_d": b_d}
        if b_a:
            mean = statistics.mean(b_a.values())
            best = max(b_a, key=b_a.get)
            s.update({"b_vs_a_mean": round(mean, 3), "b_vs_a_mean_gain_pct": round((mean - 1) * 100, 1),
                      "b_vs_a_best_workload": best, "b_vs_a_best_gain_pct": round((b_a[best] - 1) * 100, 1)})
        out.append(s)
    return out


def autocommit_results(ac, g):
    out = []
    for (commit, ms, w, s), c in sorted(ac.items(), key=lambda kv: (list(UNITS).index(kv[0][2]), int(kv[0][1]))):
        a = g.get((commit, "default", w, "plain"))
        b = g.get((commit, "default", w, "ubj-jnl"))
        out.append({"commit_s": commit, "autocommit_ms": int(ms), "workload": w, "row": "b",
                    "unit": UNITS[w], **c, "vs_a": ratio(c["median"], a and a["median"]),
                    "vs_b_default": ratio(c["median"], b and b["median"])})
    return out


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def print_tables(rounds, settings, grid, summ, acs):
    print(f"bench-ubj: medians of {rounds} rounds; {settings}")
    print("bytes: per byte the application wrote, to the backing file / what ext4 sent to its devices / to an NVRAM device;")
    print("flushes: flush requests ext4 sent to its file system's device (a, d: each an fdatasync of the backing file)")
    print(f"{'commit':>6} {'workload':9} {'row':44} {'median':>13} {'vs a':>6} {'b/this':>6} {'backing':>8} {'device':>7} {'nvram':>6} {'flushes':>7}  runs")
    for r in grid:
        print(f"{r['commit_s']:>5}s {r['workload']:9} {r['row'] + ' ' + r['name']:44} {r['median']:>8.1f} {r['unit']:4} "
              f"{fmt(r['vs_a']):>6} {fmt(r['b_vs_this']):>6} {r['backing_bytes_per_app_byte']:>8.3f} "
              f"{r['device_bytes_per_app_byte']:>7.3f} {r['nvram_bytes_per_app_byte']:>6.3f} "
              f"{fmt(r['fs_device_flushes'], '.0f'):>7}  " + " ".join(f"{x:g}" for x in r["runs"]))
    for s in summ:
        if not s["b_vs_a"] and not s["b_vs_d"]:
            continue
        line = f"commit={s['commit_s']} s: b/a " + ", ".join(f"{w} {v:.2f}" for w, v in s["b_vs_a"].items())
        if "b_vs_a_mean" in s:
            line += (f"; mean {s['b_vs_a_mean']:.2f} ({s['b_vs_a_mean_gain_pct']:+.0f} %), best "
                     f"{s['b_vs_a_best_workload']} ({s['b_vs_a_best_gain_pct']:+.0f} %)")
        if s["b_vs_d"]:
            line += "; b/d " + ", ".join(f"{w} {v:.2f}" for w, v in s["b_vs_d"].items())
        print(line)
    if acs:
        print("UBJ --autocommit-ms sweep (row b, ext4 commit=5 s; vs b: against row b at its default 1000 ms in the grid)")
        print(f"{'workload':9} {'autocommit':>10} {'median':>13} {'vs a':>6} {'vs b':>6} {'backing':>8} {'device':>7}  runs")
        for r in acs:
            print(f"{r['workload']:9} {r['autocommit_ms']:>8}ms {r['median']:>8.1f} {r['unit']:4} {fmt(r['vs_a']):>6} "
                  f"{fmt(r['vs_b_default']):>6} {r['backing_bytes_per_app_byte']:>8.3f} "
                  f"{r['device_bytes_per_app_byte']:>7.3f}  " + " ".join(f"{x:g}" for x in r["runs"]))


def main():
    path, want_json, rounds, settings = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
    rows = load(path)
    if not rows:
        sys.exit("bench-ubj: no run was measured")
    g = group(rows, "grid")
    grid = grid_results(g)
    summ = summaries(grid)
    acs = autocommit_results(group(rows, "autocommit"), g)
    if want_json:
        print(json.dumps({"rounds": rounds, "settings": settings, "grid": grid, "summary": summ,
                          "autocommit": acs}, indent=2))
    else:
        print_tables(rounds, settings, grid, summ, acs)


if __name__ == "__main__":
    main()
