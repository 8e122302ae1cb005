#!/usr/bin/env bash
# fio writes (default: 4 KiB random; --rw/--bs for others), O_DIRECT, queue depth 1 and 16, on
# the raw loop device, for:
#   nvstack   nvstack serve (nvramdisk backend) -> FUSE file -> loop device
#   raw       the same daemon, FUSE options and loop options, --backend raw (no transactions)
#   shm-loop  a loop device over a plain /dev/shm file (the ramdisk stand-in, no FUSE)
# Rounds alternate the three, in an order rotated each round (noisy shared machine); the
# table shows medians and ratios.
# Usage: scripts/bench-fio.sh [--rounds N] [--runtime S] [--size SIZE] [--threads N]
#        [--no-parallel-writes] [--max-write BYTES] [--loop-direct-io] [--rw MODE] [--bs SIZE]
#        [--json]
# (--threads, --no-parallel-writes and --max-write go to nvstack serve: the FUSE max_write,
# 4096 up to 63 blocks = 258048, the default; --loop-direct-io to every losetup; --rw and --bs
# to fio, e.g. --rw write --bs 256k for large sequential writes.) NVSTACK_BIN: the binary to
# use (default: build target/release/nvstack).
# Run as root (FUSE mounts, loop devices). Needs fio, losetup.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 runtime=10 size=1GiB threads=4 json=0 extra=() loopopts=() rw=randwrite bs=4k
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --no-parallel-writes) extra+=(--no-parallel-writes); shift ;;
    --max-write) extra+=(--max-write "$2"); shift 2 ;;
    --rw) rw=$2; shift 2 ;;
    --bs) bs=$2; shift 2 ;;
    --loop-direct-io) loopopts+=(--direct-io=on); shift ;;
    --json) json=1; shift ;;
    *) echo "bench-fio: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for t in fio losetup; do command -v $t >/dev/null || { echo "bench-fio: $t not found (apt-get install fio mount)" >&2; exit 3; }; done
[ "$(id -u)" = 0 ] || { echo "bench-fio: run as root (FUSE mounts, loop devices)" >&2; exit 3; }
if [ -n "${NVSTACK_BIN:-}" ]; then B=$NVSTACK_BIN
else cargo build --release --locked -q; B=$PWD/target/release/nvstack; fi
work=$(mktemp -d /dev/shm/nvstack-bench-fio.XXXXXX)
mnt=$(mktemp -d /tmp/nvstack-bench-fio.XXXXXX)
loop=""
cleanup() {
  [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null || true
  if mountpoint -q "$mnt"; then
    [ -f "$work/pid" ] && kill -TERM "$(cat "$work/pid")" 2>/dev/null || true
    for _ in $(seq 100); do mountpoint -q "$mnt" || break; sleep 0.1; done
    mountpoint -q "$mnt" && umount -l "$mnt"
  fi
  rm -rf "$work"; rmdir "$mnt" 2>/dev/null || true
}
trap cleanup EXIT
bytes=$($B format "$work/probe.img" --size "$size" >/dev/null && stat -c %s "$work/probe.img"); rm -f "$work/probe.img"
results="$work/results.txt"; : > "$results"

run_fio() { # device qd -> "IOPS MiB/s"
  fio --name=w --filename="$1" --rw="$rw" --bs="$bs" --direct=1 --ioengine=libaio --iodepth="$2" \
    --runtime="$runtime" --time_based --size=$((bytes / 2)) --randrepeat=0 --output-format=json 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; w=json.load(sys.stdin)["jobs"][0]["write"]; print(round(w["iops"]), round(w["bw_bytes"] / 2**20, 1))'
}
serve_up() { # backend
  rm -f "$work/img"
  if [ "$1" = nvramdisk ]; then $B format "$work/img" --size "$size" >/dev/null
  else fallocate -l "$bytes" "$work/img"; fi
  msg=$($B serve "$work/img" --mountpoint "$mnt" --backend "$1" --threads "$threads" --pid-file "$work/pid" "${extra[@]}")
  loop=$(losetup --find --show --sector-size 4096 "${loopopts[@]}" "$mnt/disk")
  # As nvstack up does: every request one FUSE write (serve prints the limit; docs/serve.md).
  sed -n 's/.*max_sectors_kb \([0-9][0-9]*\).*/\1/p' <<<"$msg" >"/sys/block/${loop#/dev/}/queue/max_sectors_kb"
}
serve_down() {
  losetup -d "$loop"; loop=""
  kill -TERM "$(cat "$work/pid")"
  for _ in $(seq 200); do mountpoint -q "$mnt" || break; sleep 0.05; done
  rm -f "$work/img"
}
systems=(nvstack raw shm-loop)
for r in $(seq "$rounds"); do
  # Rotate the order each round, so no system always runs first (after the previous round's
  # image was deleted and a new one allocated) or last.
  order=()
  for k in 0 1 2; do order+=("${systems[$(( (k + r) % 3 ))]}"); done
  for sys in "${order[@]}"; do
    case $sys in
      nvstack) serve_up nvramdisk ;;
      raw) serve_up raw ;;
      shm-loop) fallocate -l "$bytes" "$work/img"; loop=$(losetup --find --show --sector-size 4096 "${loopopts[@]}" "$work/img")
        # A loop device keeps the limit of its last attachment: the peer gets the kernel's.
        q="/sys/block/${loop#/dev/}/queue"; cat "$q/max_hw_sectors_kb" >"$q/max_sectors_kb" ;;
    esac
    # Pre-fault: write the whole test area once before timing.
    fio --name=fill --filename="$loop" --rw=write --bs=1m --direct=1 --size=$((bytes / 2)) >/dev/null 2>&1
    for qd in 1 16; do
      echo "$sys $qd $(run_fio "$loop" "$qd")" >> "$results"
    done
    if [ $sys = shm-loop ]; then losetup -d "$loop"; loop=""; rm -f "$work/img"; else serve_down; fi
    echo "round $r: $sys done" >&2
  done
done
/usr/bin/python3 - "$results" "$json" "$rounds" "$runtime" "$rw" "$bs" "${extra[*]:-}" <<'PY'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med, bw = {}, {}
for sys_, qd, iops, mibs in rows:
    med.setdefault((sys_, int(qd)), []).append(int(iops))
    bw.setdefault((sys_, int(qd)), []).append(float(mibs))
m = {k: statistics.median(v) for k, v in med.items()}
b = {k: statistics.median(v) for k, v in bw.items()}
out = []
for qd in (1, 16):
    n, r, s = m[("nvstack", qd)], m[("raw", qd)], m[("shm-loop", qd)]
    out.append({"qd": qd, "nvstack_iops": n, "raw_iops": r, "shm_loop_iops": s,
                "nvstack_mib_s": b[("nvstack", qd)], "raw_mib_s": b[("raw", qd)],
                "shm_loop_mib_s": b[("shm-loop", qd)],
                "nvstack_over_raw": round(n / r, 3), "nvstack_over_shm_loop": round(n / s, 3)})
rw, bs, serve_opts = sys.argv[5], sys.argv[6], sys.argv[7]
if sys.argv[2] == "1":
    print(json.dumps({"rounds": int(sys.argv[3]), "runtime_s": int(sys.argv[4]), "rw": rw, "bs": bs,
                      "serve_options": serve_opts, "rows": out}, indent=1))
else:
    print(f"fio {rw} bs={bs}, O_DIRECT, libaio, medians of {sys.argv[3]} rounds x {sys.argv[4]} s"
          + (f"; serve {serve_opts}" if serve_opts else ""))
    print(f"{'qd':>3} {'nvstack IOPS':>13} {'raw IOPS':>10} {'shm-loop IOPS':>14} {'nvstack/raw':>12} {'nvstack/shm':>12}"
          f" {'nvstack MiB/s':>14} {'raw MiB/s':>10} {'shm MiB/s':>10}")
    for o in out:
        print(f"{o['qd']:>3} {o['nvstack_iops']:>13.0f} {o['raw_iops']:>10.0f} {o['shm_loop_iops']:>14.0f} {o['nvstack_over_raw']:>12.3f} {o['nvstack_over_shm_loop']:>12.3f}"
              f" {o['nvstack_mib_s']:>14.1f} {o['raw_mib_s']:>10.1f} {o['shm_loop_mib_s']:>10.1f}")
PY
