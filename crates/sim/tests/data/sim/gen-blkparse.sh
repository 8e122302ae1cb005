#!/bin/bash
# Regenerates sample.blkparse (run as root): two loop devices over temporary files, the kernel's
# blk tracer on both, a small workload, and blkparse's default text output of what was traced.
#
# Why not `blktrace -d DEV -o - | blkparse -i -`: blktrace reads its per-CPU relay files from
# debugfs, and a kernel under lockdown (as on the machine that made the sample) refuses that
# ("Lockdown: blktrace: debugfs access is restricted"). The same events are available from
# ftrace's blk tracer, whose binary output is blktrace's record format; ftrace-to-blktrace.py
# strips ftrace's per-record header so that blkparse reads it unchanged. Two differences from
# a relay capture remain: blkparse prints the command as "(null)" (the relay channel's process
# notes are not in ftrace), and the sequence numbers are counts per device and CPU that the
# script sets.
#
# Usage: crates/sim/tests/data/sim/gen-blkparse.sh OUT   (the test's exact counts are for the committed file)
set -euo pipefail
OUT=$(realpath "$1")
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
T=/sys/kernel/tracing
MOUNTED=
LOOPS=()
cleanup() {
  echo 0 > $T/options/bin 2>/dev/null || true
  echo nop > $T/current_tracer 2>/dev/null || true
  for d in "${LOOPS[@]}"; do
    echo 0 > "/sys/block/$(basename "$d")/trace/enable" 2>/dev/null || true
    losetup -d "$d"
  done
  [ -n "$MOUNTED" ] && umount $T
  rm -rf "$WORK"
}
trap cleanup EXIT
if ! [ -e $T/current_tracer ]; then
  mount -t tracefs nodev $T
  MOUNTED=1
fi
for i in 1 2; do
  truncate -s 16M "$WORK/backing$i"
  LOOPS+=("$(losetup -f --show "$WORK/backing$i")")
done
D1=${LOOPS[0]}
D2=${LOOPS[1]}
for d in "$D1" "$D2"; do echo 1 > "/sys/block/$(basename "$d")/trace/enable"; done
echo blk > $T/current_tracer
echo 0 > $T/options/blk_classic
echo 1 > $T/options/bin
echo > $T/trace
cat $T/trace_pipe > "$WORK/raw.bin" &
CAT=$!
sleep 0.5
# 1. Four 4 KiB direct writes at sector 2048 of DEV1, then an 8 KiB direct read of two of them.
dd if=/dev/urandom of="$D1" bs=4k count=4 seek=256 oflag=direct status=none
dd if="$D1" of=/dev/null bs=8k count=1 skip=128 iflag=direct status=none
# 2. A buffered 8 KiB write made durable by conv=fsync: write-back, then a flush.
dd if=/dev/urandom of="$D1" bs=4k count=2 seek=1024 conv=fsync status=none
# 3. fio on DEV2: 8 random 4 KiB direct writes with an fsync every 4, then 4 random reads.
fio --name=w --filename="$D2" --size=1M --offset=4M --bs=4k --rw=randwrite --direct=1 \
    --fsync=4 --number_ios=8 --randseed=1 --output=/dev/null
fio --name=r --filename="$D2" --size=1M --offset=4M --bs=4k --rw=randread --direct=1 \
    --number_ios=4 --randseed=2 --output=/dev/null
# 4. An O_DSYNC direct write on DEV1 (FUA, or a write and a flush).
dd if=/dev/urandom of="$D1" bs=4k count=1 seek=2048 oflag=direct,dsync status=none
# 5. A discard of 64 KiB on DEV2 (udev's probe of the changed device may add readahead reads).
blkdiscard -o 1048576 -l 65536 "$D2"
sleep 0.5
kill $CAT
wait $CAT || true
python3 "$HERE/ftrace-to-blktrace.py" "$WORK/raw.bin" | blkparse -i - > "$OUT"
