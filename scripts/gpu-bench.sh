#!/usr/bin/env bash
# Every GPU figure in BENCHMARKS.md, in one run on the GPU machine (see
# ../shared/gpu/README.md). Usage: bash scripts/gpu-bench.sh BIN [OUTDIR]
# Writes bench.jsonl (one `sluice bench --json` object per line), micro.jsonl,
# info.json and profile/ (trace.json, timeline.svg, table.md, ops.json) into OUTDIR
# (default $OUT, else ./bench-out), and prints a summary line per run.
set -u
bin=${1:-.device/bin/sluice}
out=${2:-${OUT:-bench-out}}
mkdir -p "$out/profile"
: > "$out/bench.jsonl"
: > "$out/micro.jsonl"
"$bin" info
"$bin" info --json > "$out/info.json"
"$bin" demo --json | tr -d '\n ' ; echo
for i in 1 2 3; do "$bin" microbench dispatch --json -n 1000 --runs 7 | tr -d '\n' >> "$out/micro.jsonl"; echo >> "$out/micro.jsonl"; done
for i in 1 2 3; do "$bin" microbench sync --json | tr -d '\n' >> "$out/micro.jsonl"; echo >> "$out/micro.jsonl"; done
cat "$out/micro.jsonl"
bench() { # args...
  local line
  line=$(timeout 300 "$bin" bench --json --repeat 3 -n 128 "$@" 2>/dev/null | tr -d '\n')
  echo "$line" >> "$out/bench.jsonl"
  echo "$* -> $(echo "$line" | grep -o '"decode_tok_s": *[0-9.]*'), $(echo "$line" | grep -o '"dispatches_per_token": *[0-9.]*'), $(echo "$line" | grep -o '"barriers_per_token": *[0-9.]*'), $(echo "$line" | grep -o '"cpu_record_submit_us_per_token": *[0-9.]*')"
}
for m in qwen3-0.6b qwen3-4b; do
  bench --model synthetic:$m --mode replay
  bench --model synthetic:$m --mode direct
  bench --model synthetic:$m --mode replay --depth 4096
  bench --model synthetic:$m --mode replay --depth 512
  bench --model synthetic:$m --mode replay --no-fuse
  bench --model synthetic:$m --mode replay --no-reorder
done
"$bin" profile --model synthetic:qwen3-0.6b -n 8 --out "$out/profile" 2>/dev/null
