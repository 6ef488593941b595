#!/usr/bin/env python3
"""Parity of sluice with HF transformers (runs where torch + transformers exist, e.g. the
GPU machine). For each case it makes a randomly initialised model with transformers,
saves it with save_pretrained, runs HF and `sluice generate` on the same prompt ids, and
reports max |delta logit| of the first generated position and greedy-token agreement
over N steps.

usage: python3 scripts/parity.py SLUICE_BINARY OUT_DIR [--work DIR] [--steps 64] [--cases ...]
(models are written under --work, default /tmp/sluice-parity; results to OUT_DIR/parity.json)
"""
import argparse, json, os, subprocess, sys, time

import numpy as np
import torch
import transformers

CASES = {
    "qwen3-small": ("qwen3", dict(hidden_size=256, intermediate_size=704, num_hidden_layers=4,
                                  num_attention_heads=8, num_key_value_heads=2, head_dim=64,
                                  vocab_size=4099, tie_word_embeddings=True)),
    "llama-small": ("llama", dict(hidden_size=320, intermediate_size=864, num_hidden_layers=3,
                                  num_attention_heads=5, num_key_value_heads=5, head_dim=64,
                                  vocab_size=3001, tie_word_embeddings=False)),
    # Qwen2 / Qwen2.5 layout: q/k/v biases (random, like the weights).
    "qwen2-small": ("qwen2", dict(hidden_size=256, intermediate_size=704, num_hidden_layers=3,
                                  num_attention_heads=4, num_key_value_heads=2,
                                  vocab_size=4099, tie_word_embeddings=True)),
    # Llama 3.1 / 3.2 RoPE scaling, with a short original context so that every band of
    # pairs (kept, blended, divided) is exercised in 64 steps.
    "llama3-small": ("llama", dict(hidden_size=256, intermediate_size=704, num_hidden_layers=3,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                   vocab_size=3001, tie_word_embeddings=True, rope_theta=5e5,
                                   rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                     high_freq_factor=4.0,
                                                     original_max_position_embeddings=32))),
    "qwen3-0.6b": ("qwen3", dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                                 num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                                 vocab_size=151936, tie_word_embeddings=True)),
}


def make(kind, kw, dtype, path):
    kw = dict(kw)
    common = dict(rms_norm_eps=1e-6, max_position_embeddings=4096, rope_theta=1e6 if kind != "llama" else 1e4)
    common.update({k: kw.pop(k) for k in ["rope_theta"] if k in kw})
    if kind == "qwen3":
        cfg = transformers.Qwen3Config(**kw, **common)
        model = transformers.Qwen3ForCausalLM(cfg)
    elif kind == "qwen2":
        cfg = transformers.Qwen2Config(**kw, **common, use_sliding_window=False)
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        cfg = transformers.LlamaConfig(**kw, **common, attention_bias=False, mlp_bias=False)
        model = transformers.LlamaForCausalLM(cfg)
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.05 if "embed" in name or "lm_head" in name else 1.0 / np.sqrt(p.shape[-1]))
    model = model.to(dtype).eval()
    model.save_pretrained(path, safe_serialization=True)
    return model


def hf_run(model, prompt, steps):
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = model.to(dev)
    ids = torch.tensor([prompt], device=dev)
    with torch.no_grad():
        out = model(ids, use_cache=True)
        first = out.logits[0, -1].float().cpu().numpy()
        past = out.past_key_values
        tokens = [int(first.argmax())]
        for _ in range(steps - 1):
            out = model(torch.tensor([[tokens[-1]]], device=dev), past_key_values=past, use_cache=True)
            past = out.past_key_values
            tokens.append(int(out.logits[0, -1].float().argmax()))
    return first, tokens


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sluice")
    ap.add_argument("out")
    ap.add_argument("--work", default="/tmp/sluice-parity")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--cases", default="qwen3-small,llama-small,qwen2-small,llama3-small,qwen3-0.6b")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    rows = []
    prompt = [3, 14, 15, 92, 65, 35, 89, 79]
    for case in a.cases.split(","):
        kind, kw = CASES[case]
        for dt in a.dtypes.split(","):
            path = os.path.join(a.work, f"{case}-{dt}")
            model = make(kind, kw, getattr(torch, dt), path)
            first, hf_tokens = hf_run(model, prompt, a.steps)
            # The same (rounded) weights computed in f32 by HF: what sluice computes.
            if dt != "float32":
                first32, hf32_tokens = hf_run(model.float(), prompt, a.steps)
            else:
                first32, hf32_tokens = first, hf_tokens
            del model
            logits_path = os.path.join(a.work, f"{case}-{dt}.logits.f32")
            t = time.time()
            res = subprocess.run([a.sluice, "generate", "--model", path, "--prompt-ids", ",".join(map(str, prompt)),
                                  "-n", str(a.steps), "--json", "--logits-out", logits_path],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                print(f"{case} {dt}: sluice failed: {res.stderr}", file=sys.stderr)
                rows.append(dict(case=case, dtype=dt, error=res.stderr.strip()[-400:]))
                continue
            got = json.loads(res.stdout)
            ours = np.fromfile(logits_path, dtype=np.float32)
            agree = sum(1 for x, y in zip(got["tokens"], hf_tokens) if x == y)
            first_diverge = next((i for i, (x, y) in enumerate(zip(got["tokens"], hf_tokens)) if x != y), None)
            agree32 = sum(1 for x, y in zip(got["tokens"], hf32_tokens) if x == y)
            row = dict(case=case, dtype=dt, max_abs_dlogit=float(np.abs(ours - first).max()),
                       logit_scale=float(np.abs(first).max()), greedy_agree=agree, steps=a.steps,
                       first_divergence=first_diverge,
                       vs_hf_f32_compute_max_abs_dlogit=float(np.abs(ours - first32).max()),
                       vs_hf_f32_compute_greedy_agree=agree32,
                       sluice_s=round(time.time() - t, 2))
            print(json.dumps(row), flush=True)
            rows.append(row)
    with open(os.path.join(a.out, "parity.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
