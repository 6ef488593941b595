# Timing companion of docs/experiments/cmr_twin.cu (BENCHMARKS.md, twenty-seventh session).
# cuBLAS (through torch, f16) for the same shapes at 32 tokens: x [32, cols] @ W^T.
import torch, time
for name, rows, cols in [("4b qkv", 6144, 2560), ("4b o", 2560, 4096), ("4b gate2", 19456, 2560), ("4b down", 2560, 9728), ("0.6b qkv", 4096, 1024), ("0.6b gate2", 6144, 1024)]:
    ws = [torch.randn(rows, cols, device="cuda", dtype=torch.float16) for _ in range(4)]
    x = torch.randn(32, cols, device="cuda", dtype=torch.float16)
    for i in range(20): y = x @ ws[i % 4].t()
    torch.cuda.synchronize()
    best = 1e9
    for r in range(3):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for i in range(200): y = x @ ws[i % 4].t()
        e1.record(); torch.cuda.synchronize()
        best = min(best, e0.elapsed_time(e1) * 1000 / 200)
    print(f"torch {name:10s} {rows:5d} x {cols:5d}: {best:7.2f} us ({rows*cols*2/best/1e3:.0f} GB/s)")
