#!/usr/bin/env bash
# The main job: set up, build in release, show the device, run the barrier demo, then a
# decode benchmark and a short generation on the embedded default model
# (synthetic:qwen3-0.6b on a GPU, synthetic:tiny on a CPU driver such as lavapipe).
# Extra arguments go to `sluice bench` (e.g. --model synthetic:qwen3-4b -n 128).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/env.sh
cargo build --release -q -p sluice-cli
bin=./target/release/sluice
$bin info
$bin demo
$bin bench "$@"
$bin generate --prompt-ids 1,2,3 -n 16
