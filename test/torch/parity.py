#!/usr/bin/env python3
"""Parity of a transformers model trained through mfsdp.torch with single-process torch.

Run under mpirun (every rank trains its slice of each global batch through the step
library) and compared, on every rank, with the same model trained in this process by
torch alone: torch.optim.AdamW and torch.optim.Muon (Newton-Schulz in fp32, the same
variant), the same parameter groups, LR schedule and clipping, on the same global
batches. The reference takes the global batch as the ranks' slices in order, each
loss divided by the number of slices, and sums the gradients: the same mean, summed
in the order the reduction sums it, so AdamW's normalisation of near-cancelling
gradients does not turn rounding into differences. After the last step every
parameter must equal the reference's within --tol relative to its largest magnitude,
and every step's mean loss too.

    mpirun -np 2 python3 test/torch/parity.py --model llama --policy adamw --zero 3
"""

import argparse
import copy
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("MFSDP_PYTHON_DIR",
                                  os.path.join(HERE, "..", "..", "build", "python")))

import torch  # noqa: E402
import torch.optim._muon as torch_muon  # noqa: E402

import mfsdp.torch as mt  # noqa: E402
from mfsdp import _C  # noqa: E402

MODELS = ("llama", "llama-tied", "qwen3", "qwen3-moe", "mixtral", "gemma3")


def build_model(kind, layers):
    import transformers as tf
    common = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    if kind in ("llama", "llama-tied"):
        cfg = tf.LlamaConfig(**common, tie_word_embeddings=(kind == "llama-tied"))
        return tf.LlamaForCausalLM(cfg)
    if kind == "qwen3":
        cfg = tf.Qwen3Config(**common, head_dim=8, tie_word_embeddings=False)
        return tf.Qwen3ForCausalLM(cfg)
    # Gemma 3 (text): its scaled embedding holds a buffer, embed_scale, set by
    # _init_weights on the embedding's own module (inside unit 0).
    if kind == "gemma3":
        cfg = tf.Gemma3TextConfig(**common, head_dim=8, tie_word_embeddings=False)
        return tf.Gemma3ForCausalLM(cfg)
    # MoE: every expert routed (top-k = all), so that a router's near-tie cannot
    # flip a token to another expert on an fp32 rounding difference; the experts,
    # their fused tensors and the routing weights are trained all the same.
    if kind == "qwen3-moe":
        cfg = tf.Qwen3MoeConfig(**common, head_dim=8, num_experts=4, num_experts_per_tok=4,
                                moe_intermediate_size=16, decoder_sparse_step=1,
                                tie_word_embeddings=False)
        return tf.Qwen3MoeForCausalLM(cfg)
    if kind == "mixtral":
        cfg = tf.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=4,
                               tie_word_embeddings=False)
        return tf.MixtralForCausalLM(cfg)
    raise SystemExit(f"unknown model {kind}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=MODELS, default="llama")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--mesh", default=None, help="default: dp_shard=<ranks>")
    ap.add_argument("--policy", default="adamw")
    ap.add_argument("--zero", type=int, default=3)
    ap.add_argument("--prefetch", action="store_true")
    ap.add_argument("--bucket-mb", type=int, default=None)
    ap.add_argument("--accum", type=int, default=1, help="microbatches per step (no_sync)")
    ap.add_argument("--ckpt", choices=("none", "reentrant", "nonreentrant"), default="none")
    ap.add_argument("--sched", choices=("none", "warmup", "cosine"), default="none")
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--groups", action="store_true",
                    help="no weight decay for norms, biases and embeddings")
    ap.add_argument("--meta-init", action="store_true",
                    help="build on the meta device; each rank initialises unit by unit")
    ap.add_argument("--eval-between", action="store_true",
                    help="a no_grad forward between backward and step")
    ap.add_argument("--external", default=None,
                    help="a parameter the plan leaves to an outer stack (owned by a tp dim of "
                         "size 1): compiled ahead of time, passed as fully_shard(library=, "
                         "external=); it stays a torch parameter, stepped by torch's AdamW")
    ap.add_argument("--bf16", action="store_true",
                    help="bf16 mixed precision (fully_shard(param_dtype=torch.bfloat16)); torch "
                         "does the same: bf16 copies of its fp32 parameters compute each "
                         "rank's slices, whose bf16 gradients are averaged in fp32 into the "
                         "fp32 parameters' gradients (FSDP2's param_dtype=bf16, "
                         "reduce_dtype=fp32)")
    ap.add_argument("--reduce-bf16", action="store_true",
                    help="gradients reduced in bf16 (fully_shard(reduce_dtype=torch.bfloat16), "
                         "or with --bf16 mp_policy=MixedPrecisionPolicy(torch.bfloat16)); torch "
                         "does the same: each rank's gradient rounded to bf16, the ranks' "
                         "summed in bf16 in rank order (each partial sum rounded), widened "
                         "and averaged (FSDP2's reduce_dtype=bf16)")
    ap.add_argument("--unused", action="store_true",
                    help="layer 0's MLP gets an extra projection that some steps use on no "
                         "rank, some on rank 0's first slice only, some on every slice: "
                         "torch.optim skips a parameter whose .grad is None (no decay, no "
                         "moment update, its own step count), and so must mfsdp")
    ap.add_argument("--root-param", action="store_true",
                    help="the root module holds a parameter of its own, read before the "
                         "decoder layers (scaling the embeddings) and after them (scaling "
                         "the logits), as CLIP's logit_scale is: its unit encloses the "
                         "layers' units")
    ap.add_argument("--zero-grad-keep", action="store_true",
                    help="zero_grad(set_to_none=False) on both sides: a parameter that had "
                         "a gradient keeps a zero one, and is stepped when unused (torch's rule)")
    ap.add_argument("--ns-bf16", action="store_true",
                    help="Muon's Newton-Schulz in bf16 (the muon option ns_precision='bf16'); "
                         "torch.optim.Muon's reference iterates in bf16 too, rounding where "
                         "the runtime rounds (mfsdp.torch.newton_schulz_bf16)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=2, help="sequences per rank per microbatch")
    ap.add_argument("--seq", type=int, default=12)
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--break", dest="broken",
                    choices=("saved", "saved-kept", "ties", "rounding"),
                    default=None,
                    help="remove a part of the package's autograd handling (or, with --bf16, "
                         "--reduce-bf16 or --ns-bf16, the reference's bf16 roundings): the run "
                         "must then differ from the "
                         "reference (the test fails if it still matches); saved-kept removes "
                         "the saved-tensor handling but keeps the check that no tensor over a "
                         "freed ZeRO-3 unit is left: the run must then be refused")
    args = ap.parse_args()
    if args.broken == "saved-kept":
        try:
            _train(args)
        except mt.Error as e:
            from mfsdp import runtime as rt
            if "is still referenced after the unit was freed" in str(e):
                print(f"rank {rt.ranks()[0]}: with the saved-tensor handling removed the run "
                      f"is refused, as it must be: {str(e)[:120]}", flush=True)
                sys.exit(0)
            raise
        print("FAIL: with the saved-tensor handling removed the run was not refused",
              flush=True)
        sys.exit(1)
    _train(args)


def _train(args):
    from mfsdp import runtime as rt
    rank, world = rt.ranks()
    mesh = args.mesh or f"dp_shard={world}"
    torch.manual_seed(0)
    torch.set_num_threads(1)

    if args.broken in ("saved", "saved-kept"):
        mt._State._pack = lambda self, t: t
    if args.broken == "saved":
        mt._State._check_released = lambda self, unit: setattr(unit, "leases", None)
    elif args.broken == "ties":
        mt._State._tie_grad = lambda self, tie, grad: None

    ref = build_model(args.model, args.layers)
    if args.unused:
        if args.bf16 or args.reduce_bf16 or args.meta_init:
            raise SystemExit("--unused runs in fp32 without --meta-init")
        ref.model.layers[0].mlp.extra = torch.nn.Linear(ref.config.hidden_size,
                                                        ref.config.hidden_size, bias=False)
    if args.root_param:
        if args.meta_init:
            raise SystemExit("--root-param runs without --meta-init")
        ref.root_scale = torch.nn.Parameter(torch.tensor([1.25, 0.8]))
    if args.meta_init:
        with torch.device("meta"):
            model = build_model(args.model, args.layers)
    else:
        model = copy.deepcopy(ref)
    if args.ckpt != "none":
        for m in (model, ref):
            m.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": args.ckpt == "reentrant"})
        model.train()
        ref.train()
    else:
        model.train()
        ref.train()
    if args.root_param:
        for m in (model, ref):
            _with_root_scale(m)
    use_extra = [False]
    if args.unused:
        for m in (model, ref):
            _with_extra(m.model.layers[0].mlp, use_extra)

    # torch.optim's default learning rates. fp32 training is chaotic: two runs that
    # differ by 1e-7 relative in their weights end 20 AdamW steps up to 7e-5 apart
    # (measured with torch alone), and one fp32 Newton-Schulz differs from another
    # (other GEMM summation order) by ~6e-5 of the update; at lr 1e-3 the updates
    # stay small beside the weights, so the 1e-5 comparison measures the sharding,
    # not the chaos (docs/torch.md, "Parity tests").
    muon_opts = {"lr": 1e-3, "weight_decay": 0.1, "momentum": 0.95, "nesterov": True,
                 "eps": 1e-7, "ns_steps": 5, "adjust_lr_fn": "match_rms_adamw"}
    adamw_opts = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.1}
    groups = None
    if args.groups:
        # (The fused experts by their tensor's name: the package plans them as matrices.)
        groups = [{"params": ["*norm*", "*.bias", "*embed_tokens*", "*experts.gate_up_proj"],
                   "weight_decay": 0.0}]
    kw = dict(mesh=mesh, policy=args.policy, zero=args.zero, prefetch=args.prefetch,
              accumulate=args.accum > 1, bucket_mb=args.bucket_mb, adamw=adamw_opts,
              muon=dict(muon_opts, ns_precision="bf16") if args.ns_bf16 else muon_opts,
              param_groups=groups)
    if args.bf16 and args.reduce_bf16:
        kw["mp_policy"] = mt.MixedPrecisionPolicy(param_dtype=torch.bfloat16)
    elif args.bf16:
        kw["param_dtype"] = torch.bfloat16
    elif args.reduce_bf16:
        kw["reduce_dtype"] = torch.bfloat16
    if args.external:
        # The outer stack's dim: tp of size 1, so that no rank differs in it and
        # this test's reference (plain data parallelism) still applies; an outer
        # stack would reduce the parameter's gradient itself, so only a world of
        # one is compared here.
        if world != 1:
            raise SystemExit("--external runs on one rank (the outer stack does not reduce)")
        import tempfile
        from mfsdp import mfsdp_export
        work = tempfile.mkdtemp(prefix="mfsdp-external-")
        graph = mfsdp_export.export_graph(model, mt._default_units(model),
                                          (torch.zeros(1, 8, dtype=torch.long),), name="ext",
                                          mesh=f"{mesh},tp=1", owned_by={args.external: "tp"})
        with open(os.path.join(work, "model.json"), "w") as f:
            f.write(mfsdp_export.dumps(graph))
        lib = rt.compile_graph(os.path.join(work, "model.json"), os.path.join(work, "lib.so"),
                               mesh=f"{mesh},tp=1", policy=args.policy, zero=args.zero)
        kw = {k: v for k, v in kw.items() if k not in ("mesh", "policy", "zero", "prefetch",
                                                         "accumulate", "bucket_mb")}
        kw.update(library=lib, external=[args.external])
    if args.meta_init:
        kw["init_fn"] = model._init_weights
        torch.manual_seed(1234)
    model, opt = mt.fully_shard(model, **kw)
    st = model.mfsdp_state
    if args.meta_init:
        # The reference: the same init on the whole model, module by module in the
        # order the package initialised them (unit by unit), from the same seed.
        torch.manual_seed(1234)
        ref_modules = dict(ref.named_modules())
        names = {id(m): n for n, m in model.named_modules()}
        for unit in st.units:
            for m in unit.modules:
                ref._init_weights(ref_modules[names[id(m)]])
        for m in st.buffer_modules:
            if not any(m in u.modules for u in st.units):  # (those the units did)
                ref._init_weights(ref_modules[names[id(m)]])

    # The reference optimizers: the plan's choice of optimizer per parameter, the
    # same groups.
    kind = {p.name: p.optimizer for p in st.params}
    for name, q in st.external:
        # Left to the outer stack: an ordinary torch parameter, trained by
        # torch.optim.AdamW inside the returned optimizer.
        if not isinstance(q, torch.nn.Parameter) or q.device.type == "meta":
            raise SystemExit(f"external parameter {name}: not an ordinary torch parameter")
        kind[name] = _C.OPT_ADAMW
    if args.external and [n for n, _ in st.external] != [args.external]:
        raise SystemExit(f"expected {args.external} external, got {st.external}")
    pieces = [p for p in st.params if p.fused is not None]
    if args.model in ("qwen3-moe", "mixtral"):
        # transformers 5's fused experts: planned as their matrices, and under a
        # Muon policy every one of them orthogonalised on its own.
        if not pieces:
            raise SystemExit("the MoE model's fused experts were not planned as matrices")
        if "muon" in args.policy and any(p.optimizer != _C.OPT_MUON for p in pieces):
            raise SystemExit("a fused expert matrix is not under Muon: " +
                             ", ".join(p.name for p in pieces if p.optimizer != _C.OPT_MUON))
        if rank == 0:
            owners = sorted({e["owner"] for e in st.table if e["name"] in
                             {p.name for p in pieces} and e["placement"] == _C.OWNER})
            print(f"{len(pieces)} expert matrices from {len({id(p.fused) for p in pieces})} "
                  f"fused tensors; owners {owners}", flush=True)
    for p in st.params:  # a fused tensor's matrices share one optimizer in the reference
        if p.fused is not None:
            if kind.setdefault(p.fused.name, p.optimizer) != p.optimizer:
                raise SystemExit(f"{p.fused.name}: its matrices have different optimizers")
    ref_params = dict(ref.named_parameters())

    def no_decay(n):
        return args.groups and any(mt._glob(pat, n) for pat in groups[0]["params"])

    adamw_groups, muon_groups = [{"params": []}, {"params": [], "weight_decay": 0.0}], \
        [{"params": []}, {"params": [], "weight_decay": 0.0}]
    for n, p in ref_params.items():
        if kind.get(n) == _C.OPT_MUON:
            muon_groups[1 if no_decay(n) else 0]["params"].append(p)
        elif kind.get(n) == _C.OPT_ADAMW:
            adamw_groups[1 if no_decay(n) else 0]["params"].append(p)
        elif n in kind:
            raise SystemExit(f"{n}: optimizer {kind[n]} has no reference here")
    ref_opts = []
    ag = [g for g in adamw_groups if g["params"]]
    if ag:
        ref_opts.append(torch.optim.AdamW(ag, **adamw_opts))
    fused = {p.fused.name: p.fused for p in st.params if p.fused is not None}
    mg = [{**g, "params": [q for q in g["params"] if _name_of(ref, q) not in fused]}
          for g in muon_groups]
    fg = [{**g, "params": [q for q in g["params"] if _name_of(ref, q) in fused]}
          for g in muon_groups]
    mg = [g for g in mg if g["params"]]
    fg = [g for g in fg if g["params"]]
    if mg or fg:
        torch_muon._zeropower_via_newtonschulz = (
            mt.newton_schulz_bf16 if args.ns_bf16 and args.broken != "rounding"
            else mt.newton_schulz_fp32)
    if mg:
        ref_opts.append(torch.optim.Muon(mg, **muon_opts))
    if fg:
        ref_opts.append(FusedMuon(fg, {n: [pc.where for pc in f.pieces] for n, f in fused.items()},
                                  {id(q): n for n, q in ref.named_parameters()}, muon_opts))
    n_muon = sum(len(g["params"]) for g in mg) + sum(len(g["params"]) for g in fg)

    def schedulers(o):
        if args.sched == "warmup":
            return torch.optim.lr_scheduler.LambdaLR(o, lambda s: min(1.0, (s + 1) / 5))
        if args.sched == "cosine":
            return torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=args.steps, eta_min=1e-4)
        return None
    scheds = [s for s in [schedulers(opt)] + [schedulers(o) for o in ref_opts] if s is not None]

    vocab = ref.config.vocab_size
    gen = torch.Generator().manual_seed(7)
    worst_loss = 0.0
    ref_params_list = list(ref.parameters())
    for step in range(args.steps):
        per = args.batch
        data = torch.randint(0, vocab, (args.accum, world, per, args.seq), generator=gen)
        # mfsdp: this rank's slice of each microbatch.
        losses = []
        for a in range(args.accum):
            # (As a training loop moves its batch: to the model's device.)
            ids = data[a, rank].to(model.device)
            use_extra[0] = _uses_extra(step, a, rank)
            ctx = model.no_sync() if a + 1 < args.accum else _null()
            with ctx:
                out = model(input_ids=ids, labels=ids)
                (out.loss / args.accum).backward()
            losses.append(out.loss.detach())
        if args.eval_between:
            with torch.no_grad():
                model(input_ids=data[0, rank], labels=data[0, rank])
        total = None
        if args.clip > 0:
            total = float(model.clip_grad_norm_(args.clip))
        opt.step()
        opt.zero_grad(set_to_none=not args.zero_grad_keep)
        # torch alone: every rank's slice, in rank order.
        ref_loss = 0.0
        ref_slices = [[0.0] * world for _ in range(args.accum)]
        rounded = (args.bf16 or args.reduce_bf16) and args.broken != "rounding"
        if rounded:
            ref_loss = _bf16_reference(ref, data, world, args.accum, ref_slices,
                                       compute16=args.bf16, reduce16=args.reduce_bf16)
        for a in range(0 if rounded else args.accum):
            for r in range(world):
                ids = data[a, r]
                use_extra[0] = _uses_extra(step, a, r)
                o = ref(input_ids=ids, labels=ids)
                (o.loss / (args.accum * world)).backward()
                ref_slices[a][r] = o.loss.item()
                ref_loss += o.loss.item() / (args.accum * world)
        ref_total = None
        if args.clip > 0:
            ref_total = float(torch.nn.utils.clip_grad_norm_(ref_params_list, args.clip))
        for o in ref_opts:
            o.step()
            o.zero_grad(set_to_none=not args.zero_grad_keep)
        for s in scheds:
            s.step()
        # This rank's loss against torch's on the same slices.
        mine = torch.stack(losses).mean().item()
        theirs = sum(ref_slices[a][rank] for a in range(args.accum)) / args.accum
        worst_loss = max(worst_loss, abs(mine - theirs) / max(abs(theirs), 1e-12))
        if rank == 0:
            extra = f" norm {total:.6f} ref {ref_total:.6f}" if total is not None else ""
            print(f"step {step}: loss {mine:.6f} (torch {theirs:.6f}; global {ref_loss:.6f})"
                  f"{extra}", flush=True)
        if total is not None and abs(total - ref_total) > 1e-4 * max(ref_total, 1e-12):
            _finish(args, rank, f"step {step}: total norm {total} against torch's {ref_total}",
                    mismatch=True)

    state = model.full_state_dict()
    if args.external:
        # The outer stack's parameter goes through full_state_dict and back,
        # and a checkpoint, which does not hold it, is refused until the
        # caller says it saves it itself.
        q = dict(st.external)[args.external]
        kept = q.detach().clone()
        with torch.no_grad():
            q.zero_()
        model.load_full_state_dict(state)
        if not torch.equal(q.detach(), kept):
            _finish(args, rank, "load_full_state_dict did not restore the external "
                    f"{args.external}", mismatch=True)
        try:
            model.save_checkpoint(os.path.join(work, "ck"))
            _finish(args, rank, "save_checkpoint with an external parameter was not refused",
                    mismatch=True)
        except mt.Error as e:
            if args.external not in str(e) or "external_saved=True" not in str(e):
                _finish(args, rank, f"save_checkpoint's refusal does not name it: {e}",
                        mismatch=True)
        model.save_checkpoint(os.path.join(work, "ck"), external_saved=True)
    worst, where = 0.0, None
    for n, p in ref.named_parameters():
        ref_t = p.detach()
        d = (state[n] - ref_t).abs().max().item() / max(ref_t.abs().max().item(), 1e-12)
        if not math.isfinite(d):
            d = math.inf
        if d > worst:
            worst, where = d, n
    print(f"rank {rank}: {len(state)} parameters ({n_muon} under Muon), worst difference "
          f"{worst:.3e} relative ({where}), loss {worst_loss:.3e}", flush=True)
    bad = worst > args.tol or worst_loss > args.tol
    _finish(args, rank, f"worst {worst:.3e} at {where}, loss {worst_loss:.3e} > {args.tol}",
            mismatch=bad)


def _uses_extra(step, microbatch, rank):
    """--unused: whether this slice's forward uses the extra projection: never on
    steps 0, 3, 6, ...; on rank 0's first microbatch alone on steps 1, 4, ...; on
    every slice on steps 2, 5, ..."""
    return step % 3 == 2 or (step % 3 == 1 and microbatch == 0 and rank == 0)


def _with_root_scale(m):
    """The model's forward with its own parameter root_scale read before the decoder
    layers (the embeddings times root_scale[0]) and after them (the logits times
    root_scale[1]); the loss is the model's own on those logits. A subclass, so
    that copies of the model (the exporter's) run it too."""
    base = type(m)

    class RootScaled(base):
        def forward(self, input_ids=None, labels=None, **kw):
            emb = self.model.embed_tokens(input_ids) * self.root_scale[0]
            out = base.forward(self, inputs_embeds=emb, **kw)
            out.logits = out.logits * self.root_scale[1]
            if labels is not None:
                out.loss = self.loss_function(out.logits, labels,
                                              vocab_size=self.config.vocab_size)
            return out

    m.__class__ = RootScaled


def _with_extra(mlp, use):
    """The MLP's output plus its extra projection of the input, while use[0]."""
    forward = mlp.forward

    def with_extra(x):
        out = forward(x)
        return out + mlp.extra(x) if use[0] else out

    mlp.forward = with_extra


def _bf16_reference(ref, data, world, accum, slices, compute16=True, reduce16=False):
    """One step's gradients of `ref` (fp32) as bf16 mixed precision makes them: each
    rank's slices run on bf16 copies of the parameters (buffers stay fp32, as in the
    sharded model; with compute16 False on fp32 ones), their gradients accumulate in
    bf16 per rank (fp32), and the ranks' are summed in rank order in fp32 (reduce16: in
    bf16, each rank's rounded and each partial sum rounded) and averaged into ref's
    gradients. Returns the global mean loss; slices[a][r] gets each slice's."""
    ref16 = copy.deepcopy(ref)
    params = list(ref.parameters())
    params16 = list(ref16.parameters())
    with torch.no_grad():
        for p16, p in zip(params16, params):
            p16.data = p.detach().to(torch.bfloat16 if compute16 else torch.float32)
            p16.grad = None
    total = [None] * len(params)
    loss = 0.0
    for r in range(world):
        for p16 in params16:
            p16.grad = None
        for a in range(accum):
            ids = data[a, r]
            o = ref16(input_ids=ids, labels=ids)
            (o.loss / accum).backward()
            slices[a][r] = o.loss.item()
            loss += o.loss.item() / (accum * world)
        for i, p16 in enumerate(params16):
            g = p16.grad.float() if p16.grad is not None else torch.zeros_like(params[i])
            if reduce16:
                g = g.to(torch.bfloat16)
            total[i] = g if total[i] is None else total[i] + g
    for p, g in zip(params, total):
        p.grad = g.float() * (1.0 / world)
    return loss


def _name_of(model, q):
    for n, p in model.named_parameters():
        if p is q:
            return n
    return None


class FusedMuon(torch.optim.Optimizer):
    """torch.optim.Muon on each matrix of a fused tensor (transformers 5's experts,
    [E, 2I, H]: each expert's gate and up; [E, H, I]: each expert's down), as on
    4.x's separate tensors: torch's own functional muon() over views of the fused
    data, gradient and one momentum buffer per matrix."""

    def __init__(self, groups, where, names, opts):
        super().__init__(groups, dict(opts))
        self.where, self.names = where, names
        self.bufs = {}

    @torch.no_grad()
    def step(self, closure=None):
        for h in self.param_groups:
            params, grads, bufs = [], [], []
            for q in h["params"]:
                for w in self.where[self.names[id(q)]]:
                    key = (id(q), w[0], None if w[1] is None else w[1].start)
                    pv = q.data[w[0]] if w[1] is None else q.data[w[0], w[1]]
                    gv = q.grad[w[0]] if w[1] is None else q.grad[w[0], w[1]]
                    if key not in self.bufs:
                        self.bufs[key] = torch.zeros_like(gv)
                    params.append(pv)
                    grads.append(gv)
                    bufs.append(self.bufs[key])
            torch_muon.muon(params, grads, bufs, lr=h["lr"], weight_decay=h["weight_decay"],
                            momentum=h["momentum"], nesterov=h["nesterov"],
                            ns_coefficients=tuple(h.get("ns_coefficients",
                                                        (3.4445, -4.775, 2.0315))),
                            ns_steps=h["ns_steps"], eps=h["eps"], adjust_lr_fn=h["adjust_lr_fn"],
                            has_complex=False)


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _finish(args, rank, message, mismatch):
    if args.broken:
        if mismatch:
            print(f"rank {rank}: with the {args.broken} handling removed the run differs from "
                  f"torch, as it must ({message})", flush=True)
            sys.exit(0)
        print(f"rank {rank}: FAIL: with the {args.broken} handling removed the run still "
              "matches torch: this test cannot tell", flush=True)
        sys.exit(1)
    if mismatch:
        print(f"rank {rank}: FAIL: {message}", flush=True)
        sys.exit(1)
    print(f"rank {rank}: parity ok", flush=True)


if __name__ == "__main__":
    main()
