#!/usr/bin/env bash
# Record seed 004's workload for `nvstack sim nvfat` (docs/nvfat.md): PostMark on a FAT16
# volume made by mkfs.fat, driven from user space by fusefat (this kernel has no vfat), on a
# device `nvstack serve --backend raw --block-size 512` exports and records.
#
#   scripts/nvfat-record.sh OUT_DIR [FILES TRANSACTIONS [VOLUME_MIB]]
#
# Defaults are the seed's: 1,000 files of 512 B to 16 KiB in 10 subdirectories, 10,000
# transactions, no stdio buffering, a 32 MiB volume. OUT_DIR (made; must not hold a recording)
# gets:
#   trace       the device trace (docs/format.md section 13)
#   data        every write's bytes (section 13.1)
#   image       the volume as it stood when the recording started (after mkfs.fat)
#   run.json    the run: elapsed and CPU seconds (postmark, fusefat, the serve daemon), the
#               PostMark configuration, fsck.fat's verdict
#   fsck.txt, postmark.txt   their output
# fusefat writes only with `-o rw+`, which its manual calls experimental: fsck.fat -n checks
# the volume after the run and its verdict is kept (a finding is reported, not hidden).
set -euo pipefail
out=${1:?usage: nvfat-record.sh OUT_DIR [FILES TRANSACTIONS [VOLUME_MIB]]}
files=${2:-1000}
transactions=${3:-10000}
volume_mib=${4:-32}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${NVSTACK_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/nvstack}
for t in "$bin" ; do [ -x "$t" ] || { echo "nvfat-record: $t missing (cargo build --release -p nvstack)" >&2; exit 3; }; done
for t in mkfs.fat fsck.fat fusefat postmark fusermount; do
  command -v "$t" >/dev/null || { echo "nvfat-record: $t missing (bash scripts/deps.sh installs it)" >&2; exit 3; }
done
mkdir -p "$out"
if [ -e "$out/trace" ]; then echo "nvfat-record: $out/trace exists: choose an empty OUT_DIR" >&2; exit 2; fi
# The raw backend maps its image: it must be on tmpfs (DRAM standing in for NVRAM).
work=$(mktemp -d /dev/shm/nvfat-rec.XXXXXX)
dev="$work/dev" ; fat="$work/fat"
mkdir -p "$dev" "$fat"
serve_pid="" ; fuse_pid=""
cleanup() {
  set +e
  mountpoint -q "$fat" && fusermount -u "$fat"
  [ -n "$fuse_pid" ] && kill "$fuse_pid" 2>/dev/null && wait "$fuse_pid" 2>/dev/null
  [ -n "$serve_pid" ] && kill -TERM "$serve_pid" 2>/dev/null
  for _ in $(seq 50); do [ -n "$serve_pid" ] && kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
  mountpoint -q "$dev" && fusermount3 -u "$dev"
  rm -rf "$work"
}
trap cleanup EXIT

# CPU seconds (user + system) of a live process, from /proc/PID/stat.
cpu_of() { awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"; }

img="$work/fat.img"
truncate -s "${volume_mib}M" "$img"
# FAT16 as the seed (a volume under 16 MiB is too small for it: FAT12 then).
fat_bits=16 ; [ "$volume_mib" -lt 16 ] && fat_bits=12
mkfs.fat -F "$fat_bits" -n NVFAT "$img" >/dev/null
cp "$img" "$out/image"
"$bin" serve "$img" --backend raw --block-size 512 --mountpoint "$dev" --threads 1 \
  --record-trace "$out/trace" --record-data "$out/data" --pid-file "$work/serve.pid" \
  --log "$out/serve.log"
serve_pid=$(cat "$work/serve.pid")
# fusefat in the foreground of a background job, so its CPU time can be read before it exits;
# single-threaded (-s) for a run that repeats.
fusefat -f -s -o rw+ "$dev/disk" "$fat" 2>/dev/null &
fuse_pid=$!
for _ in $(seq 100); do mountpoint -q "$fat" && break; sleep 0.1; done
mountpoint -q "$fat" || { echo "nvfat-record: fusefat did not mount " >&2; exit 3; }

cat > "$work/pm.cfg" <<CFG
set location $fat
set number $files
set size 512 16384
set transactions $transactions
set subdirectories 10
set buffering false
run
quit
CFG
start=$(date +%s.%N)
/usr/bin/time -f '%U %S' -o "$work/pm.time" postmark "$work/pm.cfg" >"$out/postmark.txt"
end=$(date +%s.%N)
fuse_cpu=$(cpu_of "$fuse_pid")
serve_cpu=$(cpu_of "$serve_pid")
fusermount -u "$fat"
wait "$fuse_pid" ; fuse_pid=""
# A clean stop writes the trace's end line and the data log's trailer.
kill -TERM "$serve_pid"
for _ in $(seq 300); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$serve_pid" 2>/dev/null && { echo "nvfat-record: serve did not stop" >&2; exit 3; }
serve_pid=""
fsck_rc=0
fsck.fat -n "$img" >"$out/fsck.txt" 2>&1 || fsck_rc=$?
read -r pm_user pm_sys < "$work/pm.time"
python3 - "$out/run.json" <<PY
import json, sys
json.dump({
  "workload": "postmark",
  "files": $files, "size_bytes": [512, 16384], "transactions": $transactions,
  "subdirectories": 10, "buffering": False, "volume_mib": $volume_mib,
  "file_system": "FAT$fat_bits (mkfs.fat), fusefat 0.1a -o rw+ (experimental), nvstack serve --backend raw --block-size 512",
  "elapsed_s": round($end - $start, 6),
  "cpu_s": {"postmark": $pm_user + $pm_sys, "fusefat": $fuse_cpu, "serve": $serve_cpu},
  "fsck_exit": $fsck_rc,
}, open(sys.argv[1], "w"), indent=1)
PY
echo "nvfat-record: $out: $(wc -l < "$out/trace") trace lines, $(stat -c %s "$out/data") data bytes, elapsed $(awk "BEGIN{print $end - $start}") s, fsck.fat -n exit $fsck_rc"
tail -n +1 "$out/fsck.txt" | head -20
