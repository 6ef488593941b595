#!/usr/bin/env bash
# Runs the decode benchmarks on the GPU machine (see ../shared/gpu/README.md) and writes
# one JSON file per run into $OUT (or ./bench-out). Usage: bash scripts/gpu-bench.sh BIN
set -u
bin=${1:-.device/bin/sluice}
out=${OUT:-bench-out}
mkdir -p "$out"
run() { # name, args...
  local name=$1; shift
  echo "== $name: $*"
  timeout 300 "$bin" "$@" > "$out/$name.json" 2> "$out/$name.err"
  echo "rc=$? $(tr -d '\n ' < "$out/$name.json" | head -c 600)"
  tail -n 2 "$out/$name.err" | grep -v "loading weights" || true
}
for model in qwen3-0.6b qwen3-4b; do
  for mode in replay direct; do
    run "$model-$mode-d0" bench --model synthetic:$model --mode $mode -n 128 --repeat 3 --json
  done
  run "$model-replay-d4096" bench --model synthetic:$model --mode replay -n 128 --depth 4096 --repeat 3 --json
done
