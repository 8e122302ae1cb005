#!/usr/bin/env bash
# The main job: install what is needed, build in release mode, and run `nvstack demo` on the
# embedded default (an emulated NVRAM region under /dev/shm).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
cargo build --release --locked
./target/release/nvstack info
./target/release/nvstack demo
