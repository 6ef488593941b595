#!/usr/bin/env bash
# The batched engine on the GPU machine: `sluice bench --sequences` (like llama-batched-bench,
# pp128 tg128) for qwen3-0.6b and qwen3-4b, a 16-slot engine at 2048 positions (where the
# attention splits, decision 0012) with splitting on and off, the per-op profile of a
# 32-sequence step, then
# `sluice serve` (64 sequences, prompts mixed into the decode steps: --step-prompt-tokens 32)
# under `sluice loadgen` at 1/8/32/64 concurrent streams (after two short warm-up runs), for
# both models in f16 and Q4_K_M. Kernels alone: `cargo run --release -p sluice-kernels --example kernel_bench
# 30 batch` (build here, carry the binary).
# Usage (device tool, carry [".device"]): bash .device/on-device.sh bash scripts/gpu-batch.sh .device/bin/sluice $OUT
set -u
S=$1
OUT=${2:-/tmp}
exec > >(tee "$OUT/batch.txt") 2>&1
for m in qwen3-0.6b qwen3-4b; do
  timeout 150 "$S" bench --model synthetic:$m --sequences 1,8,32,64 -p 128 -n 128 --repeat 2 2>/dev/null
done
for split in 512 0; do
  timeout 150 "$S" bench --model synthetic:qwen3-0.6b --sequences 1,8,16 -p 2048 -n 64 --repeat 1 --batch-attention-split $split 2>/dev/null
done
timeout 60 "$S" profile --model synthetic:qwen3-0.6b --sequences 32 -n 4 --out "$OUT/profile-batch-32" > /dev/null 2>&1
sed -n 5,16p "$OUT/profile-batch-32/table.md"
for m in "qwen3-0.6b --dtype f16" "qwen3-0.6b --dtype q4_k_m" "qwen3-4b --dtype f16" "qwen3-4b --dtype q4_k_m"; do
  echo "== HTTP $m: serve --max-sequences 64, loadgen --requests 2N --max-tokens 128 --prompt-ids 128"
  "$S" serve --model synthetic:$m --port 8123 --context 512 --max-sequences 64 --kv-pool 34000 > "$OUT/serve.log" 2>&1 &
  pid=$!
  # The 4B Q4_K_M load quantizes on the CPU (~150 s); stop waiting if the server died.
  for _ in $(seq 240); do grep -q listening "$OUT/serve.log" && break; kill -0 $pid 2>/dev/null || break; sleep 1; done
  grep listening "$OUT/serve.log" || { cat "$OUT/serve.log"; continue; }
  # Warm-up: the clocks (serve records every step before it listens; --no-record-ahead
  # servers would pay the recordings here).
  timeout 60 "$S" loadgen --url http://127.0.0.1:8123 --concurrency 64 --requests 64 --max-tokens 8 --prompt-ids 128 > /dev/null 2>&1
  timeout 60 "$S" loadgen --url http://127.0.0.1:8123 --concurrency 8 --requests 8 --max-tokens 8 --prompt-ids 128 > /dev/null 2>&1
  for c in 1 8 32 64; do
    echo "-- concurrency $c"
    timeout 90 "$S" loadgen --url http://127.0.0.1:8123 --concurrency $c --requests $((2 * c)) --max-tokens 128 --prompt-ids 128
  done
  kill -TERM $pid
  wait $pid
  tail -1 "$OUT/serve.log"
done
