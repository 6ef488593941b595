#!/usr/bin/env bash
# The main job: set up, build in release, show the device and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/env.sh
cargo build --release -q -p sluice-cli
./target/release/sluice info
./target/release/sluice demo "$@"
