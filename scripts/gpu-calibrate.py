#!/usr/bin/env python3
"""Measures, on a machine with a CUDA GPU, the per-op rates the cost model's
GPU roofline rests on: bf16 GEMM throughput by shape, causal flash-attention
throughput by sequence length and head dim (forward, and forward plus
backward), and device memory bandwidth. Uses PyTorch (torch.matmul,
scaled_dot_product_attention), timed with CUDA events: warm-up first, then
the median of repeated runs, on random data.

    python3 scripts/gpu-calibrate.py [--out FILE.json] [--quick]

Prints a table and writes JSON (the machine, torch and CUDA versions, and
every measurement with its shape) for docs/benchmarks.md. Without a GPU it
says so and exits 0.
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("gpu-calibrate: PyTorch is not installed; nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("gpu-calibrate: no CUDA GPU; nothing measured")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    prop = torch.cuda.get_device_properties(0)
    reps = 10 if args.quick else 30

    def timed(fn, warm=3):
        """Seconds per call: the median over `reps` timed regions, each of
        `inner` back-to-back calls (enough for about 2 ms, so that the GPU
        runs ahead of the host and a small kernel's time is its own, not
        the host's launch latency)."""
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        once = max(a.elapsed_time(b) / 1e3, 1e-7)
        inner = int(min(200, max(1, 2e-3 // once)))
        times = []
        for _ in range(reps):
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(inner):
                fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3 / inner)
        return statistics.median(times)

    result = {
        "device": prop.name,
        "multiprocessors": prop.multi_processor_count,
        "memory_bytes": prop.total_memory,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gemm": [],
        "attention": [],
        "bandwidth": [],
    }

    # Device memory bandwidth: a large copy, bytes read plus written.
    n = 1 << 28  # 256 Mi floats, 1 GiB
    x = torch.randn(n, device=dev)
    y = torch.empty_like(x)
    t = timed(lambda: y.copy_(x))
    result["bandwidth"].append({"op": "copy", "bytes": 2 * 4 * n, "seconds": t,
                                "GBps": 2 * 4 * n / t / 1e9})
    # A memory-bound op of a layer: RMSNorm over (tokens, hidden) in bf16.
    h = torch.randn(16384, 4096, device=dev, dtype=torch.bfloat16)
    w = torch.randn(4096, device=dev, dtype=torch.bfloat16)
    rms = lambda: (h * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(h.dtype)) * w
    t = timed(rms)
    result["bandwidth"].append({"op": "rmsnorm_eager_bf16", "shape": [16384, 4096],
                                "bytes": 2 * h.numel() * 2, "seconds": t,
                                "GBps": 2 * h.numel() * 2 / t / 1e9})
    # Elementwise ops of a layer in bf16 (eager, one kernel each): a
    # residual add (two reads, one write) and SiLU(a) * b.
    a1 = torch.randn(16384, 4096, device=dev, dtype=torch.bfloat16)
    a2 = torch.randn_like(a1)
    t = timed(lambda: a1 + a2)
    result["bandwidth"].append({"op": "add_bf16", "shape": [16384, 4096],
                                "bytes": 3 * a1.numel() * 2, "seconds": t,
                                "GBps": 3 * a1.numel() * 2 / t / 1e9})
    t = timed(lambda: F.silu(a1) * a2)
    result["bandwidth"].append({"op": "silu_mul_eager_bf16", "shape": [16384, 4096],
                                "bytes": 3 * a1.numel() * 2, "seconds": t,
                                "GBps": 3 * a1.numel() * 2 / t / 1e9})
    del x, y, h, a1, a2
    # Launch overhead: a one-element kernel, back to back (eager).
    tiny = torch.zeros(1, device=dev)
    t = timed(lambda: tiny.add_(1.0))
    result["launch_seconds"] = t

    # GEMMs: (M tokens) x K @ K x N, bf16 with fp32 accumulation, and fp32.
    shapes = []
    for m in (256, 1024, 2048, 4096, 8192, 16384):
        for nn, k in ((1024, 1024), (4096, 4096), (14336, 4096), (4096, 14336),
                      (128256, 4096), (2048, 7168), (7168, 2048), (1024, 4096),
                      (6144, 4096), (8192, 8192), (28672, 8192), (8192, 28672),
                      (1408, 2048), (2048, 1408), (768, 768), (3072, 768)):
            shapes.append((m, nn, k))
    for dtype in (torch.bfloat16, torch.float32):
        for m, nn, k in shapes:
            if dtype == torch.float32 and (m not in (1024, 16384) or nn * k > 1 << 26):
                continue
            a = torch.randn(m, k, device=dev, dtype=dtype)
            b = torch.randn(k, nn, device=dev, dtype=dtype)
            t = timed(lambda: torch.matmul(a, b))
            flops = 2.0 * m * nn * k
            result["gemm"].append({"dtype": str(dtype).split(".")[-1], "m": m, "n": nn,
                                   "k": k, "seconds": t, "TFLOPs": flops / t / 1e12})
            del a, b

    # Causal flash attention (bf16): batch x heads x seq x head_dim, with the
    # tokens per call held near 16k so that every call fills the chip.
    for hd in (64, 128):
        for seq in (256, 512, 1024, 2048, 4096, 8192, 16384):
            heads = 32 if hd == 128 else 64
            batch = max(1, 16384 // seq)
            q = torch.randn(batch, heads, seq, hd, device=dev, dtype=torch.bfloat16,
                            requires_grad=True)
            k_ = torch.randn_like(q, requires_grad=True)
            v = torch.randn_like(q, requires_grad=True)
            fwd = lambda: F.scaled_dot_product_attention(q, k_, v, is_causal=True)
            tf = timed(fwd)
            o = fwd()
            go = torch.randn_like(o)

            def fwdbwd():
                out = F.scaled_dot_product_attention(q, k_, v, is_causal=True)
                out.backward(go)

            tb = timed(fwdbwd)
            # Causal: half of the 4 b h s^2 d forward FLOPs; backward 2.5x.
            f = 4.0 * batch * heads * seq * seq * hd / 2
            result["attention"].append({"head_dim": hd, "seq": seq, "batch": batch,
                                        "heads": heads, "fwd_seconds": tf,
                                        "fwd_TFLOPs": f / tf / 1e12,
                                        "fwdbwd_seconds": tb,
                                        "fwdbwd_TFLOPs": 3.5 * f / tb / 1e12})
            del q, k_, v, o, go

    print(f"gpu-calibrate: {prop.name}, {prop.multi_processor_count} SMs, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}; medians of {reps} runs (CUDA events)")
    for r in result["bandwidth"]:
        print(f"  bandwidth {r['op']:<22} {r['GBps']:8.0f} GB/s")
    print(f"  launch (eager, back to back) {result['launch_seconds'] * 1e6:.2f} us")
    print("  GEMM dtype      M      N      K   TFLOP/s")
    for r in result["gemm"]:
        print(f"       {r['dtype']:<8} {r['m']:6d} {r['n']:6d} {r['k']:6d} {r['TFLOPs']:8.1f}")
    print("  attention hd  seq  batch heads  fwd TFLOP/s  fwd+bwd TFLOP/s")
    for r in result["attention"]:
        print(f"            {r['head_dim']:3d} {r['seq']:5d} {r['batch']:5d} {r['heads']:5d}"
              f"  {r['fwd_TFLOPs']:10.1f}  {r['fwdbwd_TFLOPs']:12.1f}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
