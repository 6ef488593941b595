#!/usr/bin/env bash
# The GPU tests on the GPU machine (the device tool, ../shared/gpu/README.md), in one call.
#
# Here:   bash scripts/gpu-tests.sh pack
#   builds the release test binaries of the crates whose tests run on a device (sluice,
#   sluice-kernels, sluice-llm; not sluice-serve's and sluice-cli's, which start servers
#   and the CLI binary), strips and packs them into .device/tests/, and puts the
#   Khronos validation layer's package beside the Vulkan loader in .device/gl (run
#   ../shared/gpu/prepare.sh first; the validated tests need the layer there too).
# There:  bash .device/on-device.sh bash scripts/gpu-tests.sh run
#   (carry [".device"]) runs every packed binary in its crate's directory, one test at a
#   time, and writes $OUT/gpu-tests.txt (each binary's result line, the failing tests and
#   their panics) and $OUT/gpu-tests-full.log (everything). Exits non-zero if any failed.
#
# A binary's tests take 1-60 s on an H200 (the whole run: about 4 minutes, from the parts
# timed in the forty-fourth session). On a machine without a GPU `run` checks the same on
# lavapipe (a few minutes on 2 cores).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
case "${1:-}" in
pack)
  set -eo pipefail
  mkdir -p .device/tests .device/gl
  rm -f .device/tests/*
  cargo test --release -p sluice -p sluice-kernels -p sluice-llm --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    exe = m.get("executable")
    t = m.get("target", {})
    if exe and t.get("kind") == ["test"]:
        crate = m["package_id"].split("#")[0].rstrip("/").split("/")[-1]
        print(crate, t["name"], exe)
' | while read -r crate name exe; do
      case "$crate:$name" in
        # CPU-only suites (tokenizers, templates, fuzzers): CI runs them.
        sluice-llm:chat_templates | sluice-llm:tokenizer_* | sluice-llm:fuzz | sluice-kernels:kernels_compile) continue ;;
      esac
      strip -o "/tmp/gpu-test.$$" "$exe"
      xz -T2 -6 -c "/tmp/gpu-test.$$" > ".device/tests/$crate@$name.xz"
    done
  rm -f "/tmp/gpu-test.$$"
  if ! ls .device/gl/vulkan-validationlayers_*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/amd64/partial
    o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
    apt-get $o update >/dev/null 2>&1 || true
    (cd .device/gl && apt-get $o download vulkan-validationlayers >/dev/null 2>&1) ||
      echo "could not download vulkan-validationlayers: validated tests will fail there" >&2
  fi
  ls .device/tests
  du -sh .device
  ;;
run)
  out=${OUT:-gpu-tests-out}
  mkdir -p "$out"
  summary="$out/gpu-tests.txt"
  full="$out/gpu-tests-full.log"
  : > "$summary"
  : > "$full"
  failed=0
  for packed in .device/tests/*.xz; do
    [ -e "$packed" ] || { echo "no test binaries: run 'bash scripts/gpu-tests.sh pack' here first" | tee -a "$summary"; exit 2; }
    base=$(basename "$packed" .xz)
    crate=${base%@*}
    bin=/tmp/gpu-tests/$base
    mkdir -p /tmp/gpu-tests
    xz -dc "$packed" > "$bin" && chmod +x "$bin"
    log=/tmp/gpu-tests/$base.log
    start=$SECONDS
    (cd "crates/$crate" && timeout 300 "$bin" --test-threads 1 > "$log" 2>&1)
    rc=$?
    [ $rc -eq 0 ] || failed=1
    {
      echo "== $base: rc $rc, $((SECONDS - start)) s"
      grep -E "^test result" "$log"
      grep -E " FAILED$" "$log"
      grep -E -A2 "panicked at" "$log" | cut -c1-300
    } >> "$summary"
    { echo "== $base"; cat "$log"; } >> "$full"
  done
  cat "$summary"
  exit $failed
  ;;
*)
  echo "usage: bash scripts/gpu-tests.sh pack   (here)  |  bash scripts/gpu-tests.sh run   (on the GPU machine)" >&2
  exit 2
  ;;
esac
