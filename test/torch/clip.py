#!/usr/bin/env python3
"""CLIP trained through mfsdp.torch against single-process torch.

transformers' CLIPModel holds a parameter of its own, logit_scale, on the root
module, read after both towers (the units: their embeddings and encoder layers):
the root's unit encloses the others (docs/torch.md, "A module's own parameters
around other units"). Run under mpirun -np N: each rank trains on its slice of
every step's batch (text and images); torch alone trains on all the slices, in
rank order, with the same optimizer. Passes when every parameter ends within
--tol of torch's, relative to the larger of its magnitude and --floor (the
attention projections' biases get gradients of rounding size only: their
values stay near 1e-9 and are compared against the floor).
"""

import argparse
import copy
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("MFSDP_PYTHON_DIR",
                                  os.path.join(HERE, "..", "..", "build", "python")))

import torch  # noqa: E402

import mfsdp.torch as mt  # noqa: E402
from mfsdp import runtime as rt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zero", type=int, default=3)
    ap.add_argument("--prefetch", action="store_true")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--floor", type=float, default=1e-3)
    args = ap.parse_args()
    import transformers as tf
    rank, world = rt.ranks()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = tf.CLIPConfig(
        text_config=dict(vocab_size=64, hidden_size=32, intermediate_size=48,
                         num_hidden_layers=2, num_attention_heads=4,
                         max_position_embeddings=16, pad_token_id=0, bos_token_id=1,
                         eos_token_id=2),
        vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                           num_attention_heads=4, image_size=16, patch_size=8),
        projection_dim=16)
    ref = tf.CLIPModel(cfg)
    ref.train()
    model = copy.deepcopy(ref)
    # SGD: the update is the gradient itself, so the comparison measures the
    # gradients (AdamW turns a rounding-size gradient into a whole step).
    lr = 0.1
    example = dict(input_ids=torch.zeros(2, 8, dtype=torch.long),
                   pixel_values=torch.zeros(2, 3, 16, 16), return_loss=True)
    model, opt = mt.fully_shard(model, mesh=f"dp_shard={world}", policy="sgd", zero=args.zero,
                                prefetch=args.prefetch, example_kwargs=example,
                                sgd={"lr": lr})
    st = model.mfsdp_state
    enclosing = [u.index for u in st.units if u.encloses]
    late = sorted({t.primary.name for t in st.late})
    if rank == 0:
        print(f"{len(st.units)} units; enclosing {enclosing}, read from copies after the "
              f"enclosed units start: {late}", flush=True)
    if "logit_scale" not in late:
        raise SystemExit("FAIL: logit_scale is not handled as a parameter of an enclosing "
                         "module")
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(3)
    for step in range(args.steps):
        ids = torch.randint(0, 64, (world, 2, 8), generator=gen)
        pixels = torch.randn(world, 2, 3, 16, 16, generator=gen)
        out = model(input_ids=ids[rank], pixel_values=pixels[rank], return_loss=True)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        mine_loss = out.loss.item()
        theirs = None
        for r in range(world):
            o = ref(input_ids=ids[r], pixel_values=pixels[r], return_loss=True)
            (o.loss / world).backward()
            if r == rank:
                theirs = o.loss.item()
        ref_opt.step()
        ref_opt.zero_grad()
        if rank == 0:
            print(f"step {step}: loss {mine_loss:.6f} (torch {theirs:.6f})", flush=True)
        if abs(mine_loss - theirs) > args.tol * max(abs(theirs), 1.0):
            raise SystemExit(f"FAIL: step {step}: loss {mine_loss} against torch's {theirs}")
    state = model.full_state_dict()
    worst, where = 0.0, None
    for n, p in ref.named_parameters():
        q = state[n].float()
        d = ((q - p.detach()).abs().max() /
             max(p.detach().abs().max().item(), args.floor)).item()
        if d > worst:
            worst, where = d, n
    moved = abs(state["logit_scale"].item() - cfg.logit_scale_init_value)
    print(f"rank {rank}: {len(state)} parameters, worst difference {worst:.3e} relative "
          f"({where}); logit_scale {state['logit_scale'].item():.6f} (torch "
          f"{ref.logit_scale.item():.6f}, moved {moved:.3e} from its init)", flush=True)
    if worst > args.tol or not moved > 0:
        raise SystemExit(f"FAIL: worst {worst:.3e} at {where} (tolerance {args.tol}); "
                         f"logit_scale moved {moved:.3e}")
    print(f"rank {rank}: clip parity ok", flush=True)


if __name__ == "__main__":
    main()
