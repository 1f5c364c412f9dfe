"""Checks an export of small_model.py (the JSON the CLI wrote, argv[1])
against FLOPs counted by hand, then the Python API: the meta-device build,
device=None, recompute, rest='root', kind and owner overrides, bad units."""
import json
import os
import sys
import warnings

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "..", "tools", "export"))
import mfsdp_export as mx  # noqa: E402
import small_model as sm  # noqa: E402
import torch  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


H, V, M, S, HEADS = sm.HIDDEN, sm.VOCAB, sm.MLP, sm.SEQ, sm.HEADS
linear = lambda i, o: 2 * i * o          # forward FLOPs per token of one i->o linear
# A block per token: q, k, v, o, up, down, and attention's two matmuls
# (scores: S x head_dim per head; values: the same).
block_fwd = 4 * linear(H, H) + linear(H, M) + linear(M, H) + 2 * (2 * S * (H // HEADS) * HEADS)
# Backward: each matmul twice (input and weight gradients); the frozen
# layers.1.attn.q computes no weight gradient.
block_bwd = 2 * block_fwd
frozen_bwd = block_bwd - linear(H, H)
head_fwd = linear(H, V)                  # the tied lm_head, in the last unit

g = json.load(open(sys.argv[1]))
check(g["format"] == "mfsdp.graph" and g["version"] == 1 and g["seq_len"] == S, "header")
units = {u["name"]: u for u in g["units"]}
check([u["name"] for u in g["units"]] == ["embed", "layers.0", "layers.1", "layers.2", "norm"],
      f"unit order {[u['name'] for u in g['units']]}")
for name in ("layers.0", "layers.2"):
    c = units[name]["cost"]
    check(c["fwd_flops_per_token"] == block_fwd, f"{name} fwd {c['fwd_flops_per_token']} != {block_fwd}")
    check(c["bwd_flops_per_token"] == block_bwd, f"{name} bwd {c['bwd_flops_per_token']} != {block_bwd}")
    check(c["activation_bytes_per_token"] > 4 * H, f"{name} activation bytes")
check(units["layers.1"]["cost"]["bwd_flops_per_token"] == frozen_bwd, "frozen q: measured backward")
check(units["norm"]["cost"]["fwd_flops_per_token"] == head_fwd, "head fwd")
check(units["norm"]["cost"]["bwd_flops_per_token"] == 2 * head_fwd, "head bwd")
check(units["embed"]["cost"]["fwd_flops_per_token"] == 0, "embedding fwd")
params = {p["name"]: p for p in g["params"]}
check(params["lm_head.weight"].get("tied_to") == "embed.weight", "tie")
check(params["lm_head.weight"]["kind"] == "output", "output kind")
check(params["embed.weight"]["kind"] == "embedding", "embedding kind")
check(params["layers.0.mlp_norm.bias"]["kind"] == "norm", "norm kind")
check(params["layers.1.attn.q.weight"].get("requires_grad") is False, "frozen")
check(all(p != "lm_head.weight" for u in g["units"] for p in u["params"]), "alias in no unit")
check(params["layers.0.up.weight"]["shape"] == [M, H], "shape")

# The Python API.
direct = mx.export_graph(**sm.build(), units=["layers.*"])
check(direct["units"] == g["units"], "API export equals the CLI's")
meta = mx.export_graph(**sm.build_meta(), units=["layers.*"])
check(meta == direct, "a model built on the meta device exports the same graph")
kw = sm.build()
before = [p.clone() for p in kw["model"].parameters()]
here_ = mx.export_graph(**kw, units=["layers.*"], device=None)
check(here_ == direct, "device=None measures the same as the meta copy")
check(all(p.grad is None for p in kw["model"].parameters()), "device=None leaves no gradients")
check(all(torch.equal(a, b) for a, b in zip(before, kw["model"].parameters())), "weights untouched")
rc = mx.export_graph(**sm.build(), units=["layers.*"], recompute=True)
rcu = {u["name"]: u["cost"] for u in rc["units"]}
check(rcu["layers.0"]["recompute"] and rcu["layers.0"]["activation_bytes_per_token"] == 4 * H,
      f"recompute keeps the block input only: {rcu['layers.0']}")
check(not rcu["norm"]["recompute"], "recompute is for listed units")
root = mx.export_graph(**sm.build(), units=lambda n, m: isinstance(m, sm.Block), rest="root")
check([u["name"] for u in root["units"]] == ["root", "layers.0", "layers.1", "layers.2"],
      f"rest=root: {[u['name'] for u in root['units']]}")
check(root["units"][0]["params"] == ["embed.weight", "norm.weight"], "root unit params")
ov = mx.export_graph(**sm.build(), units=[sm.Block], kinds={"layers.*.up": "expert"},
                     owned_by={"layers.*.up.*": "ep"}, mesh={"dp_shard": 2, "ep": 2}, dtype="bf16")
op = {p["name"]: p for p in ov["params"]}
check(op["layers.2.up.bias"]["kind"] == "expert" and op["layers.2.up.bias"]["owned_by"] == ["ep"],
      "kind and owner overrides")
check(op["embed.weight"]["dtype"] == "bf16", "dtype override")
check(ov["mesh"] == {"dims": [{"name": "dp_shard", "size": 2}, {"name": "ep", "size": 2}]}, "mesh")

# Bad arguments: clear errors (ExportError is a ValueError).
bad = [
    (42, "units: expected a list of submodule names"),
    ([], "units: the list is empty"),
    (["layers.7"], "units[0]: no submodule named 'layers.7'; did you mean"),
    ([3], "units[0]: expected a submodule name (str) or a module class, got int"),
    (lambda n, m: False, "units: the callable selected no submodule"),
    (["layers", "layers.1"], "units: 'layers' (units[0]) contains 'layers.1' (units[1]); units must not nest"),
    (["layers.0.attn.q", "layers.1.attn.q", "lm_head"],
     "units: 'lm_head' (units[2]) holds no parameter of its own (its lm_head.weight is tied"),
    (["blocks.*"], "units[0]: the pattern 'blocks.*' matches no submodule"),
]
for units, want in bad:
    try:
        mx.export_graph(**sm.build(), units=units)
        check(False, f"units={units!r} was accepted")
    except mx.ExportError as e:
        check(isinstance(e, ValueError) and want in str(e), f"units={units!r}: got {e}")
others = [
    ({"kinds": {"layers.*.up": "mlp"}}, "kinds: 'layers.*.up': unknown kind 'mlp'"),
    ({"kinds": {"layers.*.upp": "linear"}}, "kinds: 'layers.*.upp' matches no parameter or module name"),
    ({"mesh": "ep=2"}, "mesh: a dp_shard dim is required, got ep"),
    ({"owned_by": {"layers.*.up.*": "dp_shard"}}, "owned_by: 'layers.*.up.*': dp_shard is a data-parallel dim"),
    ({"owned_by": {"layers.*.up.*": "tp"}, "mesh": "dp_shard=2"}, "owned_by: 'layers.*.up.*': the mesh has no dim 'tp'"),
    ({"dtype": "int8"}, "dtype: dtype int8 has no name in format 1"),
]
for extra, want in others:
    try:
        mx.export_graph(**sm.build(), units=["layers.*"], **extra)
        check(False, f"{extra!r} was accepted")
    except mx.ExportError as e:
        check(want in str(e), f"{extra!r}: got {e}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("check_small: all checks passed")
