#!/usr/bin/env bash
# The Python package against the CLI: a whole cache run and the default grid's sweep locally
# and on a 2-worker Dask LocalCluster (python/bench/bench_python.py; medians, ratios printed).
# Needs the release build and the venv of scripts/deps.sh with the package installed (as
# scripts/test.sh does). Usage: bash scripts/bench-python.sh [REPS] (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
cargo build --release --locked -p nvstack
PATH="$PWD/target/venv-python/bin:$PATH" target/venv-python/bin/pip install -q --disable-pip-version-check \
  --no-build-isolation --force-reinstall --no-deps .
# libCacheSim (scripts/deps.sh's venv) replays the same accesses as a block-level trace.
lcs_py=$PWD/target/venv-libcachesim/bin/python
work=$(mktemp -d /tmp/nvstack-bench-python.XXXXXX)
trap 'rm -rf "$work"' EXIT
lcs_args=()
if "$lcs_py" -c 'import libcachesim' >/dev/null 2>&1; then
  target/release/nvstack sim blocks --trace ../shared/traces/cloudPhysicsIO.csv --format cloudphysics \
    --output "$work/blocks.og" >/dev/null
  lcs_args=("$lcs_py" "$work/blocks.og")
else
  echo "bench-python: $lcs_py cannot import libcachesim: no libCacheSim row" >&2
fi
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) vCPUs"
cd /tmp && "$OLDPWD/target/venv-python/bin/python" "$OLDPWD/python/bench/bench_python.py" \
  "$OLDPWD/target/release/nvstack" "$OLDPWD/../shared/traces" "${1:-3}" "${lcs_args[@]}"
