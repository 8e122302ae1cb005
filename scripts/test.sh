#!/usr/bin/env bash
# Every test: formatting, lints (warnings denied), then the whole test suite, optimised
# (crash and stop-point sweeps are compute-heavy). Run as root on a fresh machine: it installs
# what it needs itself.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
cargo fmt --all -- --check
cargo clippy --release --locked --all-targets -- -D warnings
cargo build --release --locked
cargo test --release --locked -- --test-threads=2
