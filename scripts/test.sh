#!/usr/bin/env bash
# The test suite: set up, then every crate's tests on whatever Vulkan device exists
# (lavapipe on CPU-only machines) with synchronization validation on. Ends with one
# summary line "tests: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
. scripts/env.sh
log=$(mktemp)
cargo test --workspace --release "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
passed=$(grep -o '^test result: [a-zA-Z]*\. [0-9]* passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -o '[0-9]* failed;' "$log" | awk '{s += $1} END {print s + 0}')
rm -f "$log"
echo "tests: $passed passed, $failed failed"
exit "$status"
