#!/usr/bin/env bash
# UBJ under real software (issue 20, the slides of seed 001): ext4 on
#   a  plain     ext4 data=journal on the plain backing file through nvstack serve --backend
#                direct-file (FUSE, O_DIRECT, fsync = fdatasync): the slides' baseline
#   b  ubj-jnl   ext4 data=journal on a UBJ cache (NVRAM under /dev/shm) over the backing file
#   c  ubj-ord   ext4 data=ordered on the same UBJ cache
#   d  extjnl    ext4 data=journal on the plain backing file as in a, its journal on an external
#                device: an nvramdisk of the same NVRAM size as UBJ's (nvstack format + serve, a
#                loop device, mke2fs -O journal_dev; the journal is the whole device, 99.4 % of
#                the region), mkfs.ext4 -J device=..., mounted with journal_path=
#   e  pagecache ext4 data=journal on the bare backing file through the kernel's own loop
#                device and page cache (mount -o loop: no nvstack, no FUSE)
#   f  wcache    ext4 data=journal on the NVRAM write cache (up --cache write --admit all,
#                the same NVRAM size as UBJ's)
# Every mount adds noinit_itable (no lazy inode-table zeroing during the workload).
# Workloads, each on a fresh file system per system per round: fio random 4 KiB writes with an
# fsync every 32 writes and sequential 64 KiB writes with an fsync every 16 (IOzone-like,
# buffered, one file of --fio-size), and PostMark (Debian's postmark: --postmark-files files of
# 0.5-64 KB, --postmark-tx transactions, then sync -f; transactions per wall-clock second).
# Sweeps: every row at each ext4 commit interval of --commit (seconds, a list), and row b alone
# at each UBJ --autocommit-ms of --autocommit-ms (a list; ext4 commit=5 s). Systems alternate
# within each round (order rotated); medians over rounds; every ratio printed against row a
# and row b against every row. For every row, bytes written to the backing file per byte the
# application wrote: a and d from the daemon's write(2) bytes (/proc/PID/io wchar: all to the
# backing file, plus FUSE replies' headers), b, c and f from the cache's counters after a final
# `nvstack cache writeback` (so every byte that must reach the disk is counted), e from the loop
# device's sectors written (what ext4 sent; the page cache may merge some before they reach the
# file: an upper bound). Device bytes: what ext4 sent to its devices (d: both); NVRAM bytes:
# what ext4 sent to an NVRAM device (b, c, f: all of it; d: its journal).
# Usage: scripts/bench-ubj.sh [--rounds N] [--rows a,b,c,d,e,f] [--workloads fio-rand,fio-seq,postmark]
#        [--commit S[,S...]] [--autocommit-ms MS[,MS...]] [--nvram SIZE] [--backing SIZE]
#        [--fio-size SIZE] [--postmark-files N] [--postmark-tx N] [--dir DIR] [--quick] [--json]
#        [--results FILE]
# Defaults: 3 rounds, rows a-e (and f when this nvstack serves write caches), all workloads,
# commit 5, no autocommit sweep, NVRAM 512MiB, backing 4GiB under /var/tmp (the machine's
# disk), fio 128m, PostMark 4,000 files (about 130 MB) and 6,000 transactions.
# --results FILE: keep the raw runs (one line each, appended as measured; a new file) so the
# tables can be printed again: python3 scripts/bench_ubj_report.py FILE 0|1 ROUNDS SETTINGS.
# --quick: tiny sizes for a test of the script (1 round, NVRAM 16MiB, backing 256MiB, fio 8m,
# PostMark 200 files and 400 transactions, commit 1); later options override it.
# NVSTACK_BIN: the binary (default: build target/release/nvstack). Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "bench-ubj: $1" >&2; exit "${2:-2}"; }
rounds=3 rows="" workloads="fio-rand,fio-seq,postmark" commits=5 acs="" nvram=512MiB backing=4GiB
dir=/var/tmp json=0 fio_size=128m pm_files=4000 pm_tx=6000 keep=""
args=("$@")
for a in "${args[@]}"; do
  [ "$a" = --quick ] && { rounds=1 nvram=16MiB backing=256MiB fio_size=8m pm_files=200 pm_tx=400 commits=1; }
done
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) shift ;;
    --json) json=1; shift ;;
    --rounds|--rows|--workloads|--commit|--autocommit-ms|--nvram|--backing|--fio-size|--postmark-files|--postmark-tx|--dir|--results)
      [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in
        --rounds) rounds=$2 ;; --rows) rows=$2 ;; --workloads) workloads=$2 ;;
        --commit) commits=$2 ;; --autocommit-ms) acs=$2 ;; --nvram) nvram=$2 ;;
        --backing) backing=$2 ;; --fio-size) fio_size=$2 ;; --postmark-files) pm_files=$2 ;;
        --postmark-tx) pm_tx=$2 ;; --dir) dir=$2 ;; --results) keep=$2 ;;
      esac
      shift 2 ;;
    *) die "unknown argument '$1' (see the usage at the top of scripts/bench-ubj.sh)" ;;
  esac
done
posint() { [[ $2 =~ ^[1-9][0-9]*$ ]] || die "$1 $2: a positive integer"; }
posint --rounds "$rounds"; posint --postmark-files "$pm_files"; posint --postmark-tx "$pm_tx"
IFS=, read -r -a commit_list <<<"$commits"
for c in "${commit_list[@]}"; do posint "--commit (seconds)" "$c"; done
ac_list=()
[ -n "$acs" ] && IFS=, read -r -a ac_list <<<"$acs"
for m in "${ac_list[@]}"; do posint "--autocommit-ms" "$m"; done
IFS=, read -r -a wl_list <<<"$workloads"
for w in "${wl_list[@]}"; do
  case "$w" in fio-rand|fio-seq|postmark) ;; *) die "--workloads: '$w' is not fio-rand, fio-seq or postmark" ;; esac
done
[[ $fio_size =~ ^[1-9][0-9]*[kmg]$ ]] || die "--fio-size $fio_size: a number with k, m or g (fio's units)"
[ -d "$dir" ] || die "--dir $dir: no such directory"
[ -z "$keep" ] || [ ! -e "$keep" ] || die "--results $keep: the file exists (not overwritten)"
for t in fio postmark losetup mkfs.ext4 mke2fs timeout; do
  command -v $t >/dev/null || die "$t not found (apt-get install fio postmark e2fsprogs mount)" 3
done
[ "$(id -u)" = 0 ] || die "run as root (FUSE mounts, loop devices)" 3
if [ -n "${NVSTACK_BIN:-}" ]; then B=$NVSTACK_BIN
else cargo build --release --locked -q -p nvstack; B=$PWD/target/release/nvstack; fi
# Row f needs a binary that serves write caches (issue 22's cache behind `up --cache write`).
has_wcache=0
"$B" up --help | grep -q -- '--admit' && has_wcache=1
if [ -z "$rows" ]; then rows=a,b,c,d,e; [ $has_wcache = 1 ] && rows=$rows,f; fi
IFS=, read -r -a row_list <<<"$rows"
systems=()
for r in "${row_list[@]}"; do
  case "$r" in
    a) systems+=(plain) ;; b) systems+=(ubj-jnl) ;; c) systems+=(ubj-ord) ;;
    d) systems+=(extjnl) ;; e) systems+=(pagecache) ;;
    f) [ $has_wcache = 1 ] || die "--rows f: $B does not serve write caches (up --cache write --admit)"
       systems+=(wcache) ;;
    *) die "--rows: '$r' is not one of a, b, c, d, e, f" ;;
  esac
done

shm=$(mktemp -d /dev/shm/nvstack-bench-ubj.XXXXXX)
disk=$(mktemp -d "$dir/nvstack-bench-ubj.XXXXXX")
mnt=$(mktemp -d /tmp/nvstack-bench-ubj.XXXXXX)
jfuse=$(mktemp -d /tmp/nvstack-bench-ubj-jnl.XXXXXX)
if [ -n "$keep" ]; then results=$keep; : > "$results"
else results=$(mktemp /tmp/nvstack-bench-ubj-results.XXXXXX); fi
jdev=""
run_id() { echo "$mnt" | sed 's|^/||; s|/|-|g'; }
stop_journal() { # row d's journal device: detach its loop device, stop its daemon
  [ -n "$jdev" ] && { timeout 60 losetup -d "$jdev" || true; jdev=""; }
  if [ -f "$shm/jnl.pid" ]; then
    local pid; pid=$(cat "$shm/jnl.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$shm/jnl.pid"
  fi
  if mountpoint -q "$jfuse"; then umount "$jfuse" 2>/dev/null || umount -l "$jfuse"; fi
}
cleanup() {
  if mountpoint -q "$mnt"; then
    if [ -d "/run/nvstack/$(run_id)" ]; then timeout 120 "$B" down --mount "$mnt" >/dev/null 2>&1 || true
    else umount "$mnt" 2>/dev/null || umount -l "$mnt"; fi
  elif [ -d "/run/nvstack/$(run_id)" ]; then timeout 120 "$B" down --mount "$mnt" >/dev/null 2>&1 || true
  fi
  local l
  for l in $(losetup -j "$disk/backing" 2>/dev/null | cut -d: -f1); do losetup -d "$l" || true; done
  stop_journal
  rm -rf "$shm" "$disk"; [ -n "$keep" ] || rm -f "$results"; rmdir "$mnt" "$jfuse" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
state() { cat "/run/nvstack/$(run_id)/state.json"; }
field() { /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
loop_sectors() { awk '{print $7}' "/sys/block/${1#/dev/}/stat"; }
# Flush requests the device completed (field 16 of the stat file): for a and d each one is an
# fdatasync of the backing file, for b, c and f a cache flush (a UBJ commit).
loop_flushes() { awk '{print $16}' "/sys/block/${1#/dev/}/stat"; }
wchar() { awk '/^wchar/ {print $2}' "/proc/$1/io"; }
cache_written() { # image -> backing bytes written over the cache's life (UBJ: in counters)
  "$B" cache status "$1" --json | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["counters"]["backing_bytes_written"] if "counters" in d else d["backing_bytes_written"])'
}

up_cache() { # system commit [autocommit_ms] -> a fresh cache, mkfs's blocks written back
  local mode=journal cache=ubj extra=()
  [ "$1" = ubj-ord ] && mode=ordered
  [ "$1" = wcache ] && { cache=write; extra=(--admit all); }
  [ -n "${3:-}" ] && extra+=(--autocommit-ms "$3")
  local opts="data=$mode,commit=$2,noinit_itable"
  "$B" up --image "$shm/cache.img" --size "$nvram" --cache "$cache" \
    --backing "$disk/backing" --backing-size "$backing" "${extra[@]}" --fs ext4 \
    --mount-options "$opts" --mount "$mnt" >/dev/null
  # Start the workload with mkfs's blocks written back and the counters stored: the backing
  # bytes counted are the workload's alone.
  "$B" down --mount "$mnt" >/dev/null
  "$B" cache writeback "$shm/cache.img" >/dev/null
  base_cache=$(cache_written "$shm/cache.img")
  [ "$1" = wcache ] && extra=()
  [ -n "${3:-}" ] && extra=(--autocommit-ms "$3")
  "$B" up --image "$shm/cache.img" "${extra[@]}" --fs ext4 --mount-options "$opts" --mount "$mnt" >/dev/null
}

up_extjnl() { # commit -> ext4 on the plain file, its journal on an nvramdisk
  "$B" format "$shm/jnl.img" --size "$nvram" >/dev/null
  msg=$("$B" serve "$shm/jnl.img" --mountpoint "$jfuse" --pid-file "$shm/jnl.pid")
  jdev=$(losetup --find --show --sector-size 4096 "$jfuse/disk")
  # As nvstack up does: every request one FUSE write (serve prints the limit; docs/serve.md).
  sed -n 's/.*max_sectors_kb \([0-9][0-9]*\).*/\1/p' <<<"$msg" >"/sys/block/${jdev#/dev/}/queue/max_sectors_kb"
  mke2fs -q -O journal_dev -b 4096 "$jdev" >/dev/null
  truncate -s "$backing" "$disk/backing"
  mkfs.ext4 -q -F -b 4096 -J device="$jdev" "$disk/backing" >/dev/null
  "$B" up --backend direct-file --backing "$disk/backing" --fs ext4 \
    --mount-options "data=journal,commit=$1,noinit_itable,journal_path=$jdev" --mount "$mnt" >/dev/null
}

setup() { # system commit [autocommit_ms] -> mounts a fresh ext4 on $mnt
  rm -f "$shm"/* "$disk"/* 2>/dev/null || true
  case "$1" in
    plain)
      truncate -s "$backing" "$disk/backing"
      "$B" up --backend direct-file --backing "$disk/backing" --fs ext4 \
        --mount-options "data=journal,commit=$2,noinit_itable" --mount "$mnt" >/dev/null ;;
    ubj-jnl|ubj-ord|wcache) up_cache "$@" ;;
    extjnl) up_extjnl "$2" ;;
    pagecache)
      truncate -s "$backing" "$disk/backing"
      mkfs.ext4 -q -F "$disk/backing"
      mount -o "loop,data=journal,commit=$2,noinit_itable" "$disk/backing" "$mnt" ;;
  esac
}

loop_of() { # system -> the loop device under $mnt
  if [ "$1" = pagecache ]; then losetup -j "$disk/backing" | cut -d: -f1
  else state | field '["loop_dev"]'; fi
}

teardown() { # system -> sets td="backing_bytes device_bytes nvram_bytes" (uses loop, before;
  # not run in a subshell: it detaches row d's journal device and forgets it here)
  local dev_bytes=$(( ($(loop_sectors "$loop") - before) * 512 ))
  flushes=$(( $(loop_flushes "$loop") - fbefore ))
  case "$1" in
    plain|extjnl)
      local w nv=0
      w=$(wchar "$(state | field '["daemon_pid"]')")
      "$B" down --mount "$mnt" >/dev/null
      if [ "$1" = extjnl ]; then
        nv=$(( ($(loop_sectors "$jdev") - jbefore) * 512 ))
        stop_journal
      fi
      td="$((w - base_wchar)) $((dev_bytes + nv)) $nv" ;;
    ubj-*|wcache)
      "$B" down --mount "$mnt" >/dev/null
      "$B" cache writeback "$shm/cache.img" >/dev/null
      td="$(($(cache_written "$shm/cache.img") - base_cache)) $dev_bytes $dev_bytes" ;;
    pagecache)
      umount "$mnt"
      td="$dev_bytes $dev_bytes 0" ;;
  esac
}

fio_run() { # rw bs fsync_every -> "MB/s app_bytes"
  fio --name=w --directory="$mnt" --rw="$1" --bs="$2" --size="$fio_size" --fsync="$3" \
    --ioengine=psync --end_fsync=1 --randrepeat=0 --output-format=json 2>/dev/null |
    /usr/bin/python3 -c 'import json,sys; w=json.load(sys.stdin)["jobs"][0]["write"]; print(round(w["bw_bytes"] / 1e6, 2), w["io_bytes"])'
}

postmark_run() { # -> "transactions/s app_bytes"
  # PostMark itself never fsyncs and times in whole seconds: the score is its transactions
  # over the wall-clock time of the whole run plus a final sync -f (so the data are durable
  # at the end, as with fio's fsyncs).
  mkdir -p "$mnt/pm"
  local t0 t1 out
  t0=$(date +%s.%N)
  out=$(printf 'set location %s\nset number %s\nset transactions %s\nset size 500 65536\nset seed 42\nrun\nquit\n' \
    "$mnt/pm" "$pm_files" "$pm_tx" | postmark 2>/dev/null)
  sync -f "$mnt"
  t1=$(date +%s.%N)
  echo "$out" | /usr/bin/python3 -c '
import re, sys
t, secs, tx = sys.stdin.read(), float(sys.argv[2]) - float(sys.argv[1]), int(sys.argv[3])
w = re.search(r"([\d.]+) (kilo|mega|giga)?bytes written", t)
if not w:
    sys.exit("bench-ubj: postmark printed no bytes written:\n" + t)
scale = {None: 1, "kilo": 1e3, "mega": 1e6, "giga": 1e9}[w.group(2)]
print(round(tx / secs, 1), int(float(w.group(1)) * scale))' "$t0" "$t1" "$pm_tx"
}

workload() { # name -> prints "score app_bytes" (fio: MB/s, postmark: transactions/s)
  case "$1" in
    fio-rand) fio_run randwrite 4k 32 ;;
    fio-seq) fio_run write 64k 16 ;;
    postmark) postmark_run ;;
  esac
}

one() { # phase commit autocommit_ms workload system round -> one measured run, appended
  local phase=$1 c=$2 ac=$3 w=$4 s=$5 r=$6 score app back devb nvb
  if [ "$ac" = default ]; then setup "$s" "$c"; else setup "$s" "$c" "$ac"; fi
  base_wchar=0 jbefore=0
  case "$s" in plain|extjnl) base_wchar=$(wchar "$(state | field '["daemon_pid"]')") ;; esac
  if [ "$s" = extjnl ]; then jbefore=$(loop_sectors "$jdev"); fi
  loop=$(loop_of "$s"); before=$(loop_sectors "$loop"); fbefore=$(loop_flushes "$loop")
  read -r score app < <(workload "$w")
  [ -n "${app:-}" ] || die "$w on $s printed no result" 1
  td=""; teardown "$s"
  read -r back devb nvb <<<"$td"
  [ -n "${nvb:-}" ] || die "teardown of $s printed no byte counts" 1
  echo "$phase $c $ac $w $s $r $score $app $back $devb $nvb $flushes" >> "$results"
  done_runs=$((done_runs + 1))
  echo "  [$done_runs/$total_runs] $phase commit=$c autocommit=$ac round $r $w $s: $score, app $app B, backing $back B, device $devb B, nvram $nvb B, flushes $flushes" >&2
}

n=${#systems[@]} m=${#ac_list[@]}
total_runs=$(( ${#commit_list[@]} * rounds * ${#wl_list[@]} * n + rounds * ${#wl_list[@]} * m ))
done_runs=0
echo "bench-ubj: $rounds rounds, rows ${row_list[*]} (${systems[*]}), workloads ${wl_list[*]}, ext4 commit ${commit_list[*]} s, UBJ autocommit sweep: ${acs:-none}; fio $fio_size, PostMark $pm_files files / $pm_tx transactions; NVRAM $nvram under /dev/shm, backing file $backing under $dir; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) vCPUs; load $(cut -d' ' -f1-3 /proc/loadavg); $total_runs runs" >&2
echo "bench-ubj: work directories $shm $disk $mnt $jfuse" >&2
for c in "${commit_list[@]}"; do
  for r in $(seq 1 "$rounds"); do
    for w in "${wl_list[@]}"; do
      for i in $(seq 0 $((n - 1))); do
        one grid "$c" default "$w" "${systems[$(( (i + r) % n ))]}" "$r"
      done
    done
  done
done
# The autocommit sweep: row b alone, ext4 commit=5 s, the values alternating within a round.
for r in $(seq 1 "$rounds"); do
  for w in "${wl_list[@]}"; do
    for i in $(seq 0 $((m - 1))); do
      one autocommit 5 "${ac_list[$(( (i + r) % m ))]}" "$w" ubj-jnl "$r"
    done
  done
done
echo "bench-ubj: done; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

/usr/bin/python3 scripts/bench_ubj_report.py "$results" "$json" "$rounds" \
  "nvram=$nvram backing=$backing fio=$fio_size postmark=${pm_files}x$pm_tx"
