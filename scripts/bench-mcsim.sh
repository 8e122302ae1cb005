#!/usr/bin/env bash
# The committing simulator's speed against DRAMsim3 and DRAMSim2 (issue 24), in one run on one
# machine: builds DRAMsim3's trace-driven program (dramsim3main, cmake and g++, about 1.5
# minutes) and DRAMSim2's (DRAMSim, its own Makefile, about 10 s) from source on demand into
# target/peers/, then runs `nvstack bench --suite mcsim` with NVSTACK_DRAMSIM3 and
# NVSTACK_DRAMSIM2 set: the fine and global rows (at least 10^7 requests each, 10^6 with
# --quick) and each peer replaying the fine run's requests, with our requests/s over the
# fastest peer's as each row's throughput ratio. Medians of --repeat runs.
# Usage: scripts/bench-mcsim.sh [--quick] [--repeat N] [--json]
# Each peer's source, first found: NVSTACK_DRAMSIM3_SRC / NVSTACK_DRAMSIM2_SRC (a source tree
# or a bare git directory), else a clone of https://github.com/umd-memsys/DRAMsim3 /
# https://github.com/umd-memsys/DRAMSim2 at the commit below. NVSTACK_DRAMSIM3 and
# NVSTACK_DRAMSIM2 name built programs (skip the builds); NVSTACK_BIN the nvstack binary
# (skips the release build).
set -euo pipefail
cd "$(dirname "$0")/.."
commit=29817593b3389f1337235d63cac515024ab8fd6e
commit2=753819a8571d24f01e44915093e62857efafb97f
args=(--suite mcsim --no-huge)  # the simulator maps no image: one place is enough
while [ $# -gt 0 ]; do
  case "$1" in
    --quick | --json) args+=("$1"); shift ;;
    --repeat)
      [ $# -ge 2 ] && [[ "$2" =~ ^[1-9]$ ]] || { echo "bench-mcsim: --repeat needs 1 to 9" >&2; exit 2; }
      args+=(--repeat "$2"); shift 2 ;;
    *) echo "bench-mcsim: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for tool in cmake g++ make; do
  command -v $tool >/dev/null 2>&1 || { echo "bench-mcsim: $tool not found (scripts/deps.sh: cmake, build-essential)" >&2; exit 3; }
done
# fetch NAME URL COMMIT SRC ROOT PATHSPEC...: NAME's source at COMMIT into ROOT/src, from SRC
# (a bare git directory or a source tree) when set, else from a clone of URL.
fetch() {
  local name=$1 url=$2 rev=$3 src=$4 root=$5
  shift 5
  rm -rf "$root" && mkdir -p "$root/src"
  if [ -n "$src" ] && [ -f "$src/HEAD" ] && [ -d "$src/objects" ]; then
    git --git-dir="$src" archive "$rev" -- "$@" | tar -x -C "$root/src"
  elif [ -n "$src" ]; then
    cp -a "$src/." "$root/src/"
  else
    git clone -q "$url" "$root/clone" &&
      git -C "$root/clone" archive "$rev" -- "$@" | tar -x -C "$root/src" || {
      echo "bench-mcsim: cannot clone $name: set NVSTACK_${name^^}_SRC to its source" >&2; exit 3; }
  fi
  echo "bench-mcsim: building $name (${rev:0:7}) in $root" >&2
}
peer=${NVSTACK_DRAMSIM3:-}
if [ -z "$peer" ]; then
  root=$PWD/target/peers/dramsim3
  peer=$root/build/dramsim3main
  if [ ! -x "$peer" ]; then
    fetch DRAMsim3 https://github.com/umd-memsys/DRAMsim3 "$commit" "${NVSTACK_DRAMSIM3_SRC:-}" "$root" .
    cmake -S "$root/src" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >"$root/cmake.log" 2>&1 &&
      make -C "$root/build" -j"$(nproc)" dramsim3main >"$root/make.log" 2>&1 || {
      echo "bench-mcsim: DRAMsim3 did not build: see $root/cmake.log and $root/make.log" >&2; exit 3; }
  fi
fi
peer2=${NVSTACK_DRAMSIM2:-}
if [ -z "$peer2" ]; then
  root=$PWD/target/peers/dramsim2
  peer2=$root/src/DRAMSim
  if [ ! -x "$peer2" ]; then
    # Its sample traces are large files a mirror may lack: the build needs none of them (git
    # may still name a missing one as an invalid object; the archive is whole without it).
    fetch DRAMSim2 https://github.com/umd-memsys/DRAMSim2 "$commit2" "${NVSTACK_DRAMSIM2_SRC:-}" \
      "$root" . ':!traces' ':!README.pdf' ':!docs'
    make -C "$root/src" -j"$(nproc)" DRAMSim >"$root/make.log" 2>&1 || {
      echo "bench-mcsim: DRAMSim2 did not build: see $root/make.log" >&2; exit 3; }
  fi
fi
if [ -n "${NVSTACK_BIN:-}" ]; then
  B=$NVSTACK_BIN
else
  cargo build --release --locked -q -p nvstack
  B=$PWD/target/release/nvstack
fi
NVSTACK_DRAMSIM3=$peer NVSTACK_DRAMSIM2=$peer2 "$B" bench "${args[@]}"
