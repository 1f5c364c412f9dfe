#!/usr/bin/env python3
"""Trains a tiny Llama from transformers through mfsdp on the ranks mpirun starts.

    make build
    mpirun -np 2 python3 examples/torch/train.py [--steps 10] [--policy mixed_muon_adamw]

Each rank builds the same model (same seed), fully_shard exports and compiles it into
a step library and loads it; then each rank trains on its own half of every batch
and prints `step N: loss X` (rank 0, the mean over ranks of its slice's loss is what
single-process torch would see; see test/torch/parity.py for that comparison).
"""

import argparse
import os
import sys

# The example runs from the repository: the package is in the build tree. A script
# of your own imports it the same way, or after `pip install ./python`.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("MFSDP_PYTHON_DIR",
                                  os.path.join(HERE, "..", "..", "build", "python")))

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

import mfsdp.torch  # noqa: E402
from mfsdp import runtime  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--policy", default="mixed_muon_adamw")
    ap.add_argument("--zero", type=int, default=3)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank")
    ap.add_argument("--seq", type=int, default=32)
    args = ap.parse_args()

    rank, world = runtime.ranks()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128)
    model = LlamaForCausalLM(config)

    model, optimizer = mfsdp.torch.fully_shard(
        model, mesh=f"dp_shard={world}", policy=args.policy, zero=args.zero,
        adamw={"lr": 3e-3, "weight_decay": 0.1}, muon={"lr": 2e-2},
        param_groups=[{"params": ["*norm*", "*embed_tokens*"], "weight_decay": 0.0}])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))

    # A synthetic task the model can learn: each sequence counts up from a random start.
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        start = torch.randint(0, config.vocab_size, (world, args.batch, 1), generator=gen)
        ids = (start + torch.arange(args.seq)) % config.vocab_size
        out = model(input_ids=ids[rank], labels=ids[rank])
        out.loss.backward()
        norm = model.clip_grad_norm_(1.0)
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        if rank == 0:
            print(f"step {step}: loss {out.loss.item():.6f} (grad norm {float(norm):.4f})",
                  flush=True)


if __name__ == "__main__":
    main()
