#!/usr/bin/env python3
"""Measures one training step of transformers models on one CUDA GPU, by
phase, for checking the cost model's predictions against what it was not
fitted to: forward (with the loss), backward, and the optimizer step
(torch.optim.AdamW, fused), each timed with CUDA events, and the peak of
memory allocated and reserved by PyTorch's caching allocator over a step.

    python3 scripts/gpu-step-measure.py CONFIG.json [...] [--tokens N] [--seq S]
        [--checkpoint] [--precision autocast|bf16-params] [--out FILE.json]

Each CONFIG is a Hugging Face config.json (examples/hf/); the model is built
from it with random weights (fp32 parameters, bf16 autocast: the mixed
precision of FSDP2's MixedPrecisionPolicy(param_dtype=bf16) on one GPU),
attention through scaled_dot_product_attention. Times are medians over the
measured steps after warm-up steps. Without a GPU it says so and exits 0.
"""
import argparse
import json
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--tokens", type=int, default=8192, help="tokens per step")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--checkpoint", action="store_true", help="activation checkpointing")
    ap.add_argument("--precision", choices=["autocast", "bf16-params"], default="autocast",
                    help="autocast: fp32 parameters under torch.autocast(bf16); bf16-params: "
                    "the model's parameters in bf16 (the compute copies), fp32 masters "
                    "stepped by AdamW, the bf16 gradients widened into them and the "
                    "result narrowed back (FSDP2's MixedPrecisionPolicy(param_dtype=bf16, "
                    "reduce_dtype=fp32) on one GPU; mfsdp's bf16 compute copies)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    try:
        import torch
        import transformers
    except ImportError:
        print("gpu-step-measure: PyTorch and transformers are needed; nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("gpu-step-measure: no CUDA GPU; nothing measured")
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    results = []
    for path in args.configs:
        cfg = transformers.AutoConfig.from_pretrained(path)
        cfg._attn_implementation = "sdpa"
        cfg.use_cache = False
        torch.manual_seed(0)
        with torch.device(dev):
            model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
        if args.checkpoint:
            model.gradient_checkpointing_enable()
        model.train()
        params = sum(p.numel() for p in model.parameters())
        bf16 = args.precision == "bf16-params"
        if bf16:
            masters = [p.detach().clone() for p in model.parameters()]
            model.to(torch.bfloat16)
            for m in masters:
                m.requires_grad_(True)
            opt = torch.optim.AdamW(masters, lr=1e-4, fused=True)
        else:
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

        if bf16:
            for m in masters:
                m.grad = torch.zeros_like(m)

        def optimizer_step():
            if bf16:
                # Multi-tensor copies: the gradients widened into the
                # masters' fp32 gradients, the stepped masters narrowed
                # into the parameters.
                live = list(model.parameters())
                with torch.no_grad():
                    torch._foreach_copy_([m.grad for m in masters], [p.grad for p in live])
                for p in live:
                    p.grad = None
                opt.step()
                with torch.no_grad():
                    torch._foreach_copy_(live, masters)
            else:
                opt.step()
                opt.zero_grad(set_to_none=True)
        batch = max(1, args.tokens // args.seq)
        ids = torch.randint(0, cfg.vocab_size, (batch, args.seq), device=dev)
        fwd, bwd, step = [], [], []
        peak_alloc = peak_res = 0
        for i in range(args.warmup + args.steps):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            e = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            e[0].record()
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not bf16):
                loss = model(input_ids=ids, labels=ids).loss
            e[1].record()
            loss.backward()
            e[2].record()
            optimizer_step()
            e[3].record()
            torch.cuda.synchronize()
            if i >= args.warmup:
                fwd.append(e[0].elapsed_time(e[1]) / 1e3)
                bwd.append(e[1].elapsed_time(e[2]) / 1e3)
                step.append(e[2].elapsed_time(e[3]) / 1e3)
                peak_alloc = max(peak_alloc, torch.cuda.max_memory_allocated())
                peak_res = max(peak_res, torch.cuda.max_memory_reserved())
        r = {"config": path, "model_type": cfg.model_type, "params": params,
             "batch": batch, "seq": args.seq, "tokens": batch * args.seq,
             "checkpoint": args.checkpoint, "precision": args.precision,
             "forward_s": statistics.median(fwd), "backward_s": statistics.median(bwd),
             "optimizer_s": statistics.median(step),
             "peak_allocated_bytes": peak_alloc, "peak_reserved_bytes": peak_res,
             "device": torch.cuda.get_device_name(0), "torch": torch.__version__,
             "transformers": transformers.__version__}
        results.append(r)
        print(f"{path}: {params / 1e9:.3f}B params, {batch}x{args.seq} tokens, {args.precision}"
              f"{' checkpointed' if args.checkpoint else ''}: forward {r['forward_s'] * 1e3:.1f} ms, "
              f"backward {r['backward_s'] * 1e3:.1f} ms, optimizer {r['optimizer_s'] * 1e3:.1f} ms, "
              f"peak allocated {peak_alloc / 2**30:.2f} GiB, reserved {peak_res / 2**30:.2f} GiB",
              flush=True)
        del model, opt, loss, ids
        if bf16:
            del masters
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
