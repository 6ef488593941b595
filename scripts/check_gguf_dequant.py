#!/usr/bin/env python3
"""Compares sluice's dequantization of every tensor of a GGUF file with gguf-py's
(llama.cpp's numpy reference), through per-tensor checksums of the f32 bit patterns.

Usage: pip install numpy gguf
       python3 scripts/check_gguf_dequant.py FILE.gguf
(builds and runs `cargo run --release -p sluice-llm --example gguf_dequant_sums`)."""
import subprocess
import sys

import numpy as np
import gguf
from gguf.quants import dequantize

path = sys.argv[1]
out = subprocess.run(
    ["cargo", "run", "--release", "-q", "-p", "sluice-llm", "--example", "gguf_dequant_sums", "--", path],
    check=True, capture_output=True, text=True).stdout
ours = {}
for line in out.splitlines():
    name, n, s, x = line.split()
    ours[name] = (int(n), int(s), int(x))

r = gguf.GGUFReader(path)
bad = 0
checked = 0
for t in r.tensors:
    if t.name not in ours:
        continue
    raw = np.asarray(t.data)
    if t.tensor_type in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16):
        f = raw.astype(np.float32).reshape(-1) if t.tensor_type != gguf.GGMLQuantizationType.BF16 else dequantize(raw.view(np.uint8), t.tensor_type).reshape(-1)
    else:
        f = dequantize(raw.view(np.uint8), t.tensor_type).astype(np.float32).reshape(-1)
    bits = f.view(np.uint32)
    want = (bits.size, int(bits.astype(np.uint64).sum(dtype=np.uint64)), int(np.bitwise_xor.reduce(bits)))
    checked += 1
    if want != ours[t.name]:
        bad += 1
        print("MISMATCH", t.name, t.tensor_type.name, "gguf-py", want, "sluice", ours[t.name])
print(f"{checked} tensors compared, {bad} mismatches")
sys.exit(1 if bad or checked != len(ours) else 0)
