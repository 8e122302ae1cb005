#!/usr/bin/env bash
# UBJ under real software (issue 20, the slides of seed 001): ext4 on
#   a  plain     ext4 data=journal on the plain backing file through nvstack serve --backend
#                direct-file (FUSE, O_DIRECT, fsync = fdatasync): the slides' baseline
#   b  ubj-jnl   ext4 data=journal on a UBJ cache (NVRAM under /dev/shm) over the backing file
#   c  ubj-ord   ext4 data=ordered on the same UBJ cache
#   e  pagecache ext4 data=journal on the bare backing file through the kernel's own loop
#                device and page cache (mount -o loop: no nvstack, no FUSE)
# (Row d, an external ext4 journal on an nvramdisk device, is not built yet.)
# Workloads, each on a fresh file system per system per round: fio random 4 KiB writes with an
# fsync every 32 writes and sequential 64 KiB writes with an fsync every 16 (IOzone-like,
# buffered, one 256 MB file), and PostMark (Debian's postmark: 2,000 files of 0.5-64 KB, 6,000
# transactions, then sync -f; transactions per wall-clock second). Systems alternate within each round (order rotated); medians over rounds;
# ratios against row a. For every row, bytes written to the backing file per byte the
# application wrote: a from the daemon's write(2) bytes (/proc/PID/io wchar, all to the backing
# file), b and c from the cache's counters after a final `nvstack cache writeback` (so every
# byte that must reach the disk is counted), e from the loop device's sectors written (what
# ext4 sent; the page cache may merge some before they reach the file: an upper bound).
# Usage: scripts/bench-ubj.sh [--rounds N] [--commit S] [--autocommit-ms MS] [--nvram SIZE]
#        [--backing SIZE] [--dir DIR] [--json]
# (--commit: ext4's commit interval in seconds, default 5; --autocommit-ms: the cache's, default
# its own 1000; --dir: where the backing files go, default /var/tmp, on the machine's disk.)
# NVSTACK_BIN: the binary (default: build target/release/nvstack). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3 commit=5 autocommit_ms="" nvram=512MiB backing=4GiB dir=/var/tmp json=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --commit) commit=$2; shift 2 ;;
    --autocommit-ms) autocommit_ms=$2; shift 2 ;;
    --nvram) nvram=$2; shift 2 ;;
    --backing) backing=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --json) json=1; shift ;;
    *) echo "bench-ubj: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench-ubj: --rounds $rounds: a positive integer" >&2; exit 2; }
[[ $commit =~ ^[1-9][0-9]*$ ]] || { echo "bench-ubj: --commit $commit: whole seconds, at least 1" >&2; exit 2; }
for t in fio postmark losetup mkfs.ext4; do
  command -v $t >/dev/null || { echo "bench-ubj: $t not found (apt-get install fio postmark e2fsprogs mount)" >&2; exit 3; }
done
[ "$(id -u)" = 0 ] || { echo "bench-ubj: run as root (FUSE mounts, loop devices)" >&2; exit 3; }
if [ -n "${NVSTACK_BIN:-}" ]; then B=$NVSTACK_BIN
else cargo build --release --locked -q; B=$PWD/target/release/nvstack; fi
shm=$(mktemp -d /dev/shm/nvstack-bench-ubj.XXXXXX)
disk=$(mktemp -d "$dir/nvstack-bench-ubj.XXXXXX")
mnt=$(mktemp -d /tmp/nvstack-bench-ubj.XXXXXX)
results=$(mktemp /tmp/nvstack-bench-ubj-results.XXXXXX)
cleanup() {
  if mountpoint -q "$mnt"; then
    if [ -d "/run/nvstack/$(echo "$mnt" | sed 's|^/||; s|/|-|g')" ]; then "$B" down --mount "$mnt" >/dev/null 2>&1 || true
    else umount "$mnt" 2>/dev/null || umount -l "$mnt"; fi
  fi
  rm -rf "$shm" "$disk" "$results"; rmdir "$mnt" 2>/dev/null || true
}
trap cleanup EXIT
state() { cat "/run/nvstack/$(echo "$mnt" | sed 's|^/||; s|/|-|g')/state.json"; }
field() { /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
loop_sectors() { awk '{print $7}' "/sys/block/${1#/dev/}/stat"; }
cache_written() { # image -> backing bytes written over the cache's life
  "$B" cache status "$1" --json | field '["counters"]["backing_bytes_written"]'
}

setup() { # system -> mounts a fresh ext4 on $mnt (sets base_cache for a cache)
  rm -f "$shm"/* "$disk"/* 2>/dev/null || true
  local ac=()
  [ -n "$autocommit_ms" ] && ac=(--autocommit-ms "$autocommit_ms")
  case "$1" in
    plain)
      truncate -s "$backing" "$disk/backing"
      "$B" up --backend direct-file --backing "$disk/backing" --fs ext4 \
        --mount-options "data=journal,commit=$commit" --mount "$mnt" >/dev/null ;;
    ubj-jnl|ubj-ord)
      local mode=journal; [ "$1" = ubj-ord ] && mode=ordered
      "$B" up --image "$shm/cache.img" --size "$nvram" --cache ubj --backing "$disk/backing" \
        --backing-size "$backing" "${ac[@]}" --fs ext4 --mount-options "data=$mode,commit=$commit" \
        --mount "$mnt" >/dev/null
      # Start the workload with mkfs's blocks written back and the counters stored: the
      # backing bytes counted are the workload's alone.
      "$B" down --mount "$mnt" >/dev/null
      "$B" cache writeback "$shm/cache.img" >/dev/null
      base_cache=$(cache_written "$shm/cache.img")
      "$B" up --image "$shm/cache.img" "${ac[@]}" --fs ext4 \
        --mount-options "data=$mode,commit=$commit" --mount "$mnt" >/dev/null ;;
    pagecache)
      truncate -s "$backing" "$disk/backing"
      mkfs.ext4 -q -F "$disk/backing"
      mount -o "loop,data=journal,commit=$commit" "$disk/backing" "$mnt" ;;
  esac
}

loop_of() { # system -> the loop device under $mnt
  if [ "$1" = pagecache ]; then losetup -j "$disk/backing" | cut -d: -f1
  else state | field '["loop_dev"]'; fi
}

teardown() { # system loop sectors_before -> prints "backing_bytes device_bytes"
  local dev_bytes=$(( ($(loop_sectors "$2") - $3) * 512 ))
  case "$1" in
    plain)
      local pid; pid=$(state | field '["daemon_pid"]')
      local w; w=$(awk '/^wchar/ {print $2}' "/proc/$pid/io")
      "$B" down --mount "$mnt" >/dev/null
      echo "$((w - base_wchar)) $dev_bytes" ;;
    ubj-*)
      "$B" down --mount "$mnt" >/dev/null
      "$B" cache writeback "$shm/cache.img" >/dev/null
      echo "$(($(cache_written "$shm/cache.img") - base_cache)) $dev_bytes" ;;
    pagecache)
      umount "$mnt"
      echo "$dev_bytes $dev_bytes" ;;
  esac
}

workload() { # name -> prints "score app_bytes" (fio: MB/s, postmark: transactions/s)
  case "$1" in
    fio-rand|fio-seq)
      local rw=randwrite bs=4k fs=32
      [ "$1" = fio-seq ] && rw=write bs=64k fs=16
      fio --name=w --directory="$mnt" --rw="$rw" --bs="$bs" --size=256m --fsync="$fs" \
        --ioengine=psync --end_fsync=1 --randrepeat=0 --output-format=json 2>/dev/null |
        /usr/bin/python3 -c 'import json,sys; w=json.load(sys.stdin)["jobs"][0]["write"]; print(round(w["bw_bytes"] / 1e6, 2), w["io_bytes"])' ;;
    postmark)
      # PostMark itself never fsyncs and times in whole seconds: the score is its 6,000
      # transactions over the wall-clock time of the whole run plus a final sync -f (so the
      # data are durable at the end, as with fio's fsyncs).
      mkdir -p "$mnt/pm"
      local t0 t1 out
      t0=$(date +%s.%N)
      out=$(printf 'set location %s\nset number 2000\nset transactions 6000\nset size 500 65536\nset seed 42\nrun\nquit\n' "$mnt/pm" | postmark 2>/dev/null)
      sync -f "$mnt"
      t1=$(date +%s.%N)
      echo "$out" | /usr/bin/python3 -c '
import re, sys
t, secs = sys.stdin.read(), float(sys.argv[2]) - float(sys.argv[1])
w = re.search(r"([\d.]+) (kilo|mega|giga)?bytes written", t)
scale = {None: 1, "kilo": 1e3, "mega": 1e6, "giga": 1e9}[w.group(2)]
print(round(6000 / secs, 1), int(float(w.group(1)) * scale))' "$t0" "$t1" ;;
  esac
}

systems=(plain ubj-jnl ubj-ord pagecache)
workloads=(fio-rand fio-seq postmark)
echo "bench-ubj: $rounds rounds, systems ${systems[*]}, workloads ${workloads[*]}, ext4 commit=$commit s; NVRAM $nvram under /dev/shm, backing file $backing under $dir; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) vCPUs" >&2
for r in $(seq 1 "$rounds"); do
  for w in "${workloads[@]}"; do
    for i in $(seq 0 $((${#systems[@]} - 1))); do
      s=${systems[$(( (i + r) % ${#systems[@]} ))]}
      setup "$s"
      base_wchar=0
      [ "$s" = plain ] && base_wchar=$(awk '/^wchar/ {print $2}' "/proc/$(state | field '["daemon_pid"]')/io")
      dev=$(loop_of "$s"); before=$(loop_sectors "$dev")
      read -r score app < <(workload "$w")
      read -r back devb < <(teardown "$s" "$dev" "$before")
      echo "$w $s $r $score $app $back $devb" >> "$results"
      echo "  round $r $w $s: $score, app $app B, backing $back B, device $devb B" >&2
    done
  done
done

/usr/bin/python3 - "$results" "$json" "$commit" <<'EOF'
import json, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
want_json, commit = sys.argv[2] == "1", sys.argv[3]
names = {"plain": "a ext4 data=journal, plain file (direct-file)", "ubj-jnl": "b ext4 data=journal on UBJ",
         "ubj-ord": "c ext4 data=ordered on UBJ", "pagecache": "e ext4 data=journal, mount -o loop (page cache)"}
units = {"fio-rand": "MB/s", "fio-seq": "MB/s", "postmark": "tx/s"}
out = []
for w in units:
    base = None
    for s in names:
        rs = [r for r in rows if r[0] == w and r[1] == s]
        if not rs:
            continue
        med = statistics.median(float(r[3]) for r in rs)
        back = statistics.median(int(r[5]) / max(int(r[4]), 1) for r in rs)
        dev = statistics.median(int(r[6]) / max(int(r[4]), 1) for r in rs)
        if s == "plain":
            base = med
        out.append({"workload": w, "system": s, "row": names[s], "unit": units[w], "median": med,
                    "runs": [float(r[3]) for r in rs], "vs_a": med / base if base else None,
                    "backing_bytes_per_app_byte": round(back, 3), "device_bytes_per_app_byte": round(dev, 3)})
if want_json:
    print(json.dumps({"commit_s": int(commit), "results": out}, indent=2))
    sys.exit(0)
print(f"ext4 commit={commit} s; medians of {len(out[0]['runs'])} rounds")
print(f"{'workload':9} {'row':48} {'median':>10} {'vs a':>6} {'backing B/app B':>16} {'device B/app B':>15}")
for o in out:
    vs = f"{o['vs_a']:.2f}" if o["vs_a"] else "-"
    print(f"{o['workload']:9} {o['row']:48} {o['median']:>8.1f} {o['unit']:4} {vs:>6} "
          f"{o['backing_bytes_per_app_byte']:>16.3f} {o['device_bytes_per_app_byte']:>15.3f}")
EOF
