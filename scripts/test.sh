#!/usr/bin/env bash
# The test suite: set up, then every crate's tests on whatever Vulkan device exists
# (lavapipe on CPU-only machines) with synchronization validation on.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/env.sh
cargo test --workspace --release "$@"
