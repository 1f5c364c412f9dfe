#!/usr/bin/env python3
"""mfsdp's CUDA optimizer kernels against PyTorch's, on one GPU, one run.

    python3 scripts/gpu-kernel-bench.py BIN_DIR [--reps N] [--adamw COUNTS]
                                        [--ns SHAPES|none]

Runs BIN_DIR/mfsdp-bench-cuda-kernels (runtime/bench/CudaKernelBench.cpp:
the fused multi-tensor AdamW, one AdamW launch per tensor, a device copy of
the same bytes, and Newton-Schulz in fp32 and bf16, symmetric and GEMM
forms, and the symmetric form by strip size), then times PyTorch on the same tensors on the same GPU in the same
process run: torch.optim.AdamW with fused=True and with foreach=True (the
same hyperparameters, state already initialised), and Newton-Schulz as
torch.optim.Muon computes it (torch.optim._muon._zeropower_via_newtonschulz:
bf16, three GEMMs per iteration) and the same code in fp32 (TF32 off).
Each figure is the median of N timed calls (CUDA events) after two
warm-ups. Prints a markdown table per kernel with milliseconds, achieved
bandwidth or FLOP rate, and the ratio torch / mfsdp (above 1: mfsdp is
faster). Needs a CUDA device and PyTorch with CUDA; exits 3 without one.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


# The AdamW tensors by default: one Llama-3-8B decoder layer (q and o 4096x4096,
# k and v 1024x4096, gate and up 14336x4096, down 4096x14336, two norms).
LLAMA3_8B_LAYER = [4096 * 4096, 1024 * 4096, 1024 * 4096, 4096 * 4096, 14336 * 4096,
                   14336 * 4096, 4096 * 14336, 4096, 4096]


def median_ms(torch, reps, body):
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    for _ in range(2):
        body()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        body()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def library_path(bin_dir):
    """The bundle's or build's lib/ beside BIN_DIR, then the directories of
    cuBLAS (under the CUDA prefix, or in Python's nvidia-* packages, as
    scripts/gpu-check.sh --prebuilt finds them)."""
    import glob
    import site

    dirs = [os.path.join(os.path.dirname(os.path.abspath(bin_dir)), "lib")]
    roots = glob.glob("/usr/local/cuda*/lib64") + glob.glob("/usr/local/cuda*/targets/*/lib")
    roots += ["/usr/lib/x86_64-linux-gnu"] + site.getsitepackages()
    for want in ("libcublas.so.13", "libcublasLt.so.13"):
        for root in roots:
            hits = glob.glob(os.path.join(root, "**", want), recursive=True)
            if hits:
                dirs.append(os.path.dirname(hits[0]))
                break
    old = os.environ.get("LD_LIBRARY_PATH")
    return ":".join(dirs + ([old] if old else []))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin_dir")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--adamw", metavar="COUNT,COUNT,...",
                    help="the AdamW tensors' element counts (default: one Llama-3-8B "
                         "layer); N*COUNT repeats a count N times")
    ap.add_argument("--ns", metavar="RxC,RxC,...",
                    help="Newton-Schulz shapes, or none (default: the binary's)")
    args = ap.parse_args()
    counts = LLAMA3_8B_LAYER
    if args.adamw:
        counts = []
        for item in args.adamw.split(","):
            times, _, count = item.rpartition("*")
            counts += [int(count)] * (int(times) if times else 1)

    exe = os.path.join(args.bin_dir, "mfsdp-bench-cuda-kernels")
    cmd = [exe, "--reps", str(args.reps), "--adamw", ",".join(str(c) for c in counts)]
    if args.ns:
        cmd += ["--ns", args.ns]
    run = subprocess.run(cmd, capture_output=True, text=True,
                         env=dict(os.environ, LD_LIBRARY_PATH=library_path(args.bin_dir)))
    if run.returncode == 3:
        print("gpu-kernel-bench: no CUDA device; nothing measured")
        return 3
    if run.returncode != 0:
        sys.stderr.write(run.stdout + run.stderr)
        print(f"gpu-kernel-bench: {exe} exited {run.returncode}")
        return 1
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    device = next(r for r in rows if r["kind"] == "device")
    copy = next(r for r in rows if r["kind"] == "copy")
    adamw = {r["form"]: r for r in rows if r["kind"] == "adamw"}
    ns = [r for r in rows if r["kind"] == "ns"]

    import torch

    if not torch.cuda.is_available():
        print("gpu-kernel-bench: PyTorch sees no CUDA device; nothing measured")
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    print(f"gpu-kernel-bench: {device['name']}, torch {torch.__version__} "
          f"(CUDA {torch.version.cuda}), median of {args.reps} calls after 2 warm-ups")

    # AdamW on the element counts the binary was given.
    total = sum(counts)
    gen = torch.Generator(device=dev).manual_seed(7)
    torch_ms = {}
    for form in ("fused", "foreach"):
        params = [torch.nn.Parameter(torch.rand(n, device=dev, generator=gen) * 2 - 1)
                  for n in counts]
        for p in params:
            p.grad = (torch.rand(p.numel(), device=dev, generator=gen) - 0.5) * 2e-2
        opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1, **{form: True})
        opt.step()  # creates the state
        torch_ms[form] = median_ms(torch, args.reps, opt.step)
        del opt, params
        torch.cuda.empty_cache()

    gbs = lambda nbytes, ms: nbytes / (ms * 1e-3) / 1e9
    print()
    print(f"AdamW over {len(counts)} tensors ({len(set(counts))} sizes), {total:,} fp32 elements "
          f"(bytes counted 28 per element: reads p, g, m, v; writes p, m, v)")
    print()
    print("| kernel | ms | GB/s | torch fused / this |")
    print("| --- | --- | --- | --- |")
    print(f"| device copy of the fp32 elements (cudaMemcpy, 8 B/element) | {copy['ms']:.3f} | "
          f"{gbs(copy['bytes'], copy['ms']):.0f} | |")
    for form, label in (("multi", "mfsdp adamwMulti (one launch)"),
                        ("per_tensor", "mfsdp adamwStep per tensor")):
        r = adamw[form]
        print(f"| {label} | {r['ms']:.3f} | {gbs(r['bytes'], r['ms']):.0f} | "
              f"{torch_ms['fused'] / r['ms']:.2f} |")
    for form in ("fused", "foreach"):
        ms = torch_ms[form]
        print(f"| torch.optim.AdamW({form}=True) | {ms:.3f} | {gbs(28 * total, ms):.0f} | "
              f"{torch_ms['fused'] / ms:.2f} |")

    if not ns:
        return 0

    # Newton-Schulz.
    from torch.optim._muon import _zeropower_via_newtonschulz as torch_ns

    coeffs = (3.4445, -4.7750, 2.0315)

    def ns_fp32(g):
        x = g.clone()
        if g.size(0) > g.size(1):
            x = x.T
        x.div_(x.norm().clamp(min=1e-7))
        a, b, c = coeffs
        for _ in range(5):
            gram = x @ x.T
            upd = torch.addmm(gram, gram, gram, beta=b, alpha=c)
            x = torch.addmm(x, upd, x, beta=a)
        return x.T if g.size(0) > g.size(1) else x

    print()
    print("Newton-Schulz, 5 iterations (rate counted with the three-GEMM FLOPs, "
          "4 s^2 l + 2 s^3 per iteration, whatever form ran)")
    print()
    print("| shape | precision | mfsdp syrk ms | mfsdp gemm ms | torch ms | "
          "TFLOP/s mfsdp best | TFLOP/s torch | torch / mfsdp best |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    shapes = sorted({(r["rows"], r["cols"]) for r in ns}, key=lambda s: (s[0] * s[1], s))
    for rows_, cols_ in shapes:
        g = torch.rand(rows_, cols_, device=dev, generator=gen) * 2 - 1
        for precision in ("fp32", "bf16"):
            mine = {r["form"]: r for r in ns if (r["rows"], r["cols"], r["precision"])
                    == (rows_, cols_, precision)}
            if precision == "bf16":
                tms = median_ms(torch, args.reps, lambda: torch_ns(g, coeffs, 5, 1e-7))
            else:
                tms = median_ms(torch, args.reps, lambda: ns_fp32(g))
            best = min(mine["syrk"]["ms"], mine["gemm"]["ms"])
            flops = mine["gemm"]["gemm_flops"]
            print(f"| {rows_}x{cols_} | {precision} | {mine['syrk']['ms']:.3f} | "
                  f"{mine['gemm']['ms']:.3f} | {tms:.3f} | {flops / best / 1e9:.0f} | "
                  f"{flops / tms / 1e9:.0f} | {tms / best:.2f} |")
    strips = [r for r in rows if r["kind"] == "ns_strip"]
    if strips:
        print()
        print("The symmetric form by strip rows (NewtonSchulzHyper::syrkStrip), ms; "
              "* marks the default")
        print()
        sizes = sorted({r["strip"] for r in strips})
        print("| shape | precision | " + " | ".join(str(z) for z in sizes) + " |")
        print("| --- | --- | " + " | ".join("---" for _ in sizes) + " |")
        for rows_, cols_ in shapes:
            for precision in ("fp32", "bf16"):
                got = {r["strip"]: r for r in strips
                       if (r["rows"], r["cols"], r["precision"]) == (rows_, cols_, precision)}
                if not got:
                    continue
                cells = []
                for z in sizes:
                    r = got.get(z)
                    cells.append("" if r is None else
                                 f"{r['ms']:.3f}{'*' if r['default'] == z else ''}")
                print(f"| {rows_}x{cols_} | {precision} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
