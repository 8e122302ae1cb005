#!/usr/bin/env bash
# SQLite target (issue 4): 20,000 single-row transactions, WAL, synchronous=FULL, one process
# and one libsqlite3 (Debian's /usr/bin/python3), for the default VFS on the machine's disk,
# the nvstack VFS (database on that disk, WAL on an emulated NVRAM region in /dev/shm) and the
# default VFS on /dev/shm (not durable: the ceiling). Prints a table with the ratios; --json
# prints one JSON document. Other flags: --txns N, --runs R, --disk-runs R, --disk-dir DIR,
# --shm-dir DIR, --region-size SIZE (scripts/bench_sqlite.py --help).
#
# The extension is $NVSTACK_SQLITE_EXT, or built here (cargo build --release -p nvstack-sqlite).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/python3 ]; then
  echo "bench-sqlite: /usr/bin/python3 (Debian's, whose sqlite3 module loads extensions) is missing: apt-get install python3" >&2
  exit 3
fi
ext="${NVSTACK_SQLITE_EXT:-}"
if [ -z "$ext" ]; then
  cargo build --release --locked -p nvstack-sqlite >&2
  target="${CARGO_TARGET_DIR:-$PWD/target}"
  ext="$target/release/libnvstack_sqlite.so"
fi
if [ ! -f "$ext" ]; then
  echo "bench-sqlite: $ext is missing" >&2
  exit 3
fi
exec /usr/bin/python3 scripts/bench_sqlite.py --ext "$ext" "$@"
