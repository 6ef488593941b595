#!/usr/bin/env bash
# The test suite: set up, then every crate's tests on whatever Vulkan device exists
# (lavapipe on CPU-only machines) with synchronization validation on. Ends with one
# summary line "tests: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
. scripts/env.sh
log=$(mktemp)
# Gates: formatting and lints (every unsafe block documented) before the tests; a gate
# failure counts as one failed test in the summary line.
gate_failed=0
if ! cargo fmt --all --check; then
  echo "gate: cargo fmt --all --check failed (run cargo fmt --all)" >&2
  gate_failed=$((gate_failed + 1))
fi
if ! cargo clippy --workspace --all-targets --release -- -D warnings -D clippy::undocumented_unsafe_blocks; then
  echo "gate: cargo clippy failed" >&2
  gate_failed=$((gate_failed + 1))
fi
cargo test --workspace --release --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
passed=$(grep -o '^test result: [a-zA-Z]*\. [0-9]* passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -o '[0-9]* failed;' "$log" | awk '{s += $1} END {print s + 0}')
rm -f "$log"
failed=$((failed + gate_failed))
echo "tests: $passed passed, $failed failed"
[ "$gate_failed" -eq 0 ] || [ "$status" -ne 0 ] || status=1
exit "$status"
