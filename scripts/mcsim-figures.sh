#!/usr/bin/env bash
# The committing simulator's figures (seed 003 Figs. 8-11, docs/mcsim.md) regenerated in one go:
# records the three traces (nvramdisk fast and paper, 16 lanes x 200 writes; the SQLite journal
# store, 16 databases x 100 transactions), then runs commit-figures (Figs. 8, 9 and 11 from one
# grid) on the four kernels and the three traces and commit-frequency on the kernels, each grid in
# parallel across the host's cores (rayon: RAYON_NUM_THREADS=1 runs it on one). Writes the
# tables (*.txt) and SVG figures into OUTDIR and prints the wall time of each step and the total.
# Usage: scripts/mcsim-figures.sh OUTDIR   (OUTDIR must not exist)
# NVSTACK_BIN overrides the binary (and skips the release build); the sqlite trace needs
# target/release/libnvstack_sqlite.so or NVSTACK_SQLITE_EXT, and the sqlite3 tool.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: scripts/mcsim-figures.sh OUTDIR (a new directory)" >&2; exit 2; }
out=$1
[ -e "$out" ] && { echo "mcsim-figures: $out exists: give a new directory" >&2; exit 2; }
if [ -n "${NVSTACK_BIN:-}" ]; then
  B=$NVSTACK_BIN
else
  cargo build --release --locked -q -p nvstack -p nvstack-sqlite
  B=$PWD/target/release/nvstack
fi
mkdir -p "$out"
ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); }
start=$(ms)
step() {
  local name=$1 t0
  shift
  t0=$(ms)
  "$@"
  printf '%-28s %8s s\n' "$name" "$(secs $(($(ms) - t0)))" >&2
}
for p in fast paper; do
  step "record nvramdisk $p" "$B" sim commit-record --protocol "$p" --threads 16 --writes 200 \
    --output "$out/nvramdisk-$p.trace" >/dev/null
done
step "record sqlite" "$B" sim commit-record --workload sqlite --threads 16 --writes 100 \
  --output "$out/sqlite.trace" >/dev/null
sources=(--kernel hashmap --kernel btree --kernel kv --kernel tx
  --trace "$out/nvramdisk-fast.trace" --trace "$out/nvramdisk-paper.trace" --trace "$out/sqlite.trace")
# Figs. 8, 9 and 11 share one grid: one run prints the three tables (commit-ipc, commit-time
# and commit-syncs print the same tables one at a time, each running the grid again).
step "commit-figures (8, 9, 11)" "$B" sim commit-figures "${sources[@]}" --plot "$out" \
  >"$out/commit-figures.txt"
step commit-frequency "$B" sim commit-frequency --plot "$out" >"$out/commit-frequency.txt"
printf '%-28s %8s s\n' "all figures" "$(secs $(($(ms) - start)))" >&2
