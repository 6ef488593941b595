#!/usr/bin/env python3
"""Writes crates/sluice-llm/tests/fixtures/quant_blocks.gguf: for every block format
sluice decodes, a few blocks of bytes and the f32 values llama.cpp's gguf-py
(`gguf.quants.dequantize`, numpy) decodes them to. crates/sluice-llm/tests/quant_fixture.rs
checks that
sluice's `dequantize` gives the same values bit for bit.

Blocks: random bytes with the f16 scale fields set to finite values (every nibble, high
bit and scale pattern occurs), plus, when the SmolLM2 file is given, the first blocks of
real tensors (Q8_0 token_embd, Q4_1 attn_q). Tensors: `<fmt>.q` (raw blocks, stored as a
U8 tensor so no reader reinterprets them) and `<fmt>.f32` (expected values).

Usage: pip install numpy gguf; python3 scripts/quant_fixture.py [SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import sys
import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize

OUT = "crates/sluice-llm/tests/fixtures/quant_blocks.gguf"
rng = np.random.default_rng(20261123)

# format -> (blocks, byte offsets of f16 scale fields in a block)
FORMATS = {
    "q8_0": (T.Q8_0, 4, [0]),
    "q4_0": (T.Q4_0, 4, [0]),
    "q4_1": (T.Q4_1, 4, [0, 2]),
    "q5_0": (T.Q5_0, 4, [0]),
    "q5_1": (T.Q5_1, 4, [0, 2]),
    "q4_k": (T.Q4_K, 2, [0, 2]),
    "q5_k": (T.Q5_K, 2, [0, 2]),
    "q6_k": (T.Q6_K, 2, [208]),
}


def random_blocks(qt, n, scale_offsets):
    be, bb = gguf.GGML_QUANT_SIZES[qt]
    b = rng.integers(0, 256, size=(n, bb), dtype=np.uint8)
    for off in scale_offsets:
        s = (rng.standard_normal(n) * 0.01).astype(np.float16)
        b[:, off:off + 2] = s.view(np.uint8).reshape(n, 2)
    return b.reshape(-1)


w = gguf.GGUFWriter(OUT, "sluice-quant-fixture")
for name, (qt, n, offs) in FORMATS.items():
    q = random_blocks(qt, n, offs)
    f = dequantize(q, qt).astype(np.float32).reshape(-1)
    w.add_tensor(f"{name}.q", q, raw_dtype=T.I8)
    w.add_tensor(f"{name}.f32", f)

if len(sys.argv) > 1:
    r = gguf.GGUFReader(sys.argv[1])
    want = {"token_embd.weight": ("smol.q8_0", T.Q8_0), "blk.0.attn_q.weight": ("smol.q4_1", T.Q4_1)}
    for t in r.tensors:
        if t.name in want:
            name, qt = want[t.name]
            assert t.tensor_type == qt, (t.name, t.tensor_type)
            be, bb = gguf.GGML_QUANT_SIZES[qt]
            q = np.asarray(t.data).reshape(-1).view(np.uint8)[: 4 * bb].copy()
            f = dequantize(q, qt).astype(np.float32).reshape(-1)
            w.add_tensor(f"{name}.q", q.view(np.int8), raw_dtype=T.I8)
            w.add_tensor(f"{name}.f32", f)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", OUT)
