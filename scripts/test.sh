#!/usr/bin/env bash
# Every test: formatting, lints (warnings denied), then the whole suite in the test profile:
# optimised (the crash and stop-point sweeps are compute-heavy) with debug assertions and
# overflow checks on, so the pair assertions run. Run as root on a fresh machine: it installs
# what it needs itself. Ends with one line: "tests: N passed, N failed, N skipped" (skipped: the
# tests marked #[ignore], each with its reason; a test never skips by returning early).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
cargo fmt --all -- --check
# The architecture invariants (ARCHITECTURE.md) on the crate graph: a forbidden edge fails here.
bash scripts/check-layers.sh
# TIGER_STYLE's limit on every crate: no shipped function over 70 lines; a longer one fails
# here, named.
python3 scripts/fn-lengths.py --max 70 --top 0 crates/*/src sqlite-vfs/src
cargo clippy --release --locked --workspace --all-targets -- -D warnings
cargo build --release --locked --workspace
# The SQLite extension twice: as shipped (`cargo build -p nvstack-sqlite`, no power-cut
# machinery), kept aside, then with the feature `powercut` that the tests' power cuts need.
cargo build --release --locked -p nvstack-sqlite
mkdir -p target/release/shipped
cp target/release/libnvstack_sqlite.so target/release/shipped/
cargo build --release --locked -p nvstack-sqlite --features powercut
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
if [ -x target/venv-libcachesim/bin/python ]; then
  export NVSTACK_LIBCACHESIM_PYTHON="$PWD/target/venv-libcachesim/bin/python"
fi
NVSTACK_BIN="$PWD/target/release/nvstack" NVSTACK_SQLITE_EXT="$PWD/target/release/libnvstack_sqlite.so" \
  NVSTACK_SQLITE_EXT_SHIPPED="$PWD/target/release/shipped/libnvstack_sqlite.so" \
  cargo test --locked --workspace --all-targets --no-fail-fast -- --test-threads=2 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
passed=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed' "$log" | awk '{s+=$6} END {print s+0}')
skipped=$(grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored' "$log" | awk '{s+=$8} END {print s+0}')
# The Python package: built into the venv of scripts/deps.sh by one pip command from the
# repository (maturin builds the abi3 wheel), then pytest (python/tests). Its counts join the
# closing line; a package that does not build or install is one failure.
pylog=$(mktemp)
trap 'rm -f "$log" "$pylog"' EXIT
if PATH="$PWD/target/venv-python/bin:$PATH" target/venv-python/bin/pip install -q --disable-pip-version-check \
  --no-build-isolation --force-reinstall --no-deps . &&
  (cd python/tests && NVSTACK_BIN="$PWD/../../target/release/nvstack" \
    NVSTACK_SHARED_TRACES="$PWD/../../../shared/traces" \
    ../../target/venv-python/bin/python -m pytest -q -p no:cacheprovider . 2>&1) | tee "$pylog"; then
  :
else
  status=1
fi
py_line=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped)' "$pylog" | tail -1)
py_count() { grep -Eo "[0-9]+ $1" <<<"$py_line" | awk '{s+=$1} END {print s+0}'; }
passed=$((passed + $(py_count passed)))
failed=$((failed + $(py_count failed) + $(py_count error)))
skipped=$((skipped + $(py_count skipped)))
[ -n "$py_line" ] || { echo "python tests: no pytest summary" >&2; failed=$((failed + 1)); status=1; }
set -e
echo
echo "tests: $passed passed, $failed failed, $skipped skipped"
if [ "$passed" -eq 0 ]; then
  echo "no test ran" >&2
  exit 1
fi
exit "$status"
