"""Checks an export of moe_model.py (the JSON the CLI wrote, argv[1]): each
fused expert tensor is written as its matrices, in its place and unit, a tied
one as matrices tied one by one; then the Python API: split_experts=False,
owners, kind overrides, the naming rule and its errors."""
import json
import math
import os
import sys
import warnings

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "..", "tools", "export"))
import mfsdp_export as mx  # noqa: E402
import moe_model as mm  # noqa: E402

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


E, H, I = mm.EXPERTS, mm.HIDDEN, mm.INTER
g = json.load(open(sys.argv[1]))
params = {p["name"]: p for p in g["params"]}
names = [p["name"] for p in g["params"]]
units = {u["name"]: u for u in g["units"]}

# Layer 0: router, then gate_up_proj's matrices e-major (gate, up), then
# down_proj's, where the fused tensors were.
m0 = "layers.0.mlp.experts"
want = (["layers.0.norm.weight", "layers.0.proj.weight", "layers.0.mlp.gate.weight"] +
        [f"{m0}.gate_up_proj.{e}.{h}" for e in range(E) for h in ("gate", "up")] +
        [f"{m0}.down_proj.{e}" for e in range(E)])
check(names[1:1 + len(want)] == want, f"layer 0 order: {names[1:1 + len(want)]}")
check(units["layers.0"]["params"] == want, "layer 0 unit holds the matrices in order")
for n in want[3:]:
    p = params[n]
    shape = [I, H] if ".gate_up_proj." in n else [H, I]
    check(p["shape"] == shape, f"{n}: shape {p['shape']}")
    check(p["module"] == m0 and p["kind"] == "expert" and p["dtype"] == "f32",
          f"{n}: module, kind, dtype {p}")
    check("tied_to" not in p and "owned_by" not in p and "requires_grad" not in p, f"{n}: {p}")
check(not any(n.endswith(("gate_up_proj", "down_proj")) for n in names), "no 3-D tensor left")

# Block 1 shares block 0's down_proj: its matrices are aliases of block 0's,
# one by one, in no unit.
for e in range(E):
    a = params[f"layers.1.mlp.experts.down_proj.{e}"]
    check(a.get("tied_to") == f"{m0}.down_proj.{e}", f"tie of down_proj.{e}: {a}")
check(not any(".down_proj." in n for n in units["layers.1"]["params"]), "aliases in no unit")
check("layers.1.mlp.experts.gate_up_proj.3.up" in units["layers.1"]["params"], "layer 1 gate_up")

# The Python API: the same graph, and with the 3-D tensors kept whole.
kw = mm.build()
direct = mx.export_graph(**kw, units=["layers.*"], device=None)
check(direct == g, "the API exports what the CLI wrote")
whole = mx.export_graph(**mm.build(), units=["layers.*"], device=None, split_experts=False)
wp = {p["name"]: p for p in whole["params"]}
check(wp[f"{m0}.gate_up_proj"]["shape"] == [E, 2 * I, H], "split_experts=False keeps gate_up_proj")
check(wp["layers.1.mlp.experts.down_proj"]["tied_to"] == f"{m0}.down_proj", "3-D tie kept")
check([u["cost"] for u in whole["units"]] == [u["cost"] for u in g["units"]],
      "splitting changes no cost")
elements = lambda graph, u: sum(
    math.prod(p["shape"]) for p in graph["params"] if p["name"] in u["params"])
check([elements(whole, u) for u in whole["units"]] == [elements(g, u) for u in g["units"]],
      "splitting changes no unit's elements")

# Owners and frozen flags are copied to every matrix.
model = mm.build()
model["model"].layers[0].mlp.experts.gate_up_proj.requires_grad_(False)
ep = mx.export_graph(**model, units=["layers.*"], device=None, mesh="dp_shard=2,ep=2",
                     owned_by={"**.experts.**": "ep"})
epp = {p["name"]: p for p in ep["params"]}
check(all(epp[f"{m0}.gate_up_proj.{e}.{h}"].get("owned_by") == ["ep"]
          and epp[f"{m0}.gate_up_proj.{e}.{h}"].get("requires_grad") is False
          for e in range(E) for h in ("gate", "up")), "owned_by and requires_grad on each matrix")
check("owned_by" not in epp["layers.1.mlp.experts.down_proj.0"], "an alias has no owner")

# Only kind 'expert' splits: overridden to 'other', the tensors stay whole.
other = mx.export_graph(**mm.build(), units=["layers.*"], device=None,
                        kinds={"**.experts.*": "other"})
check(any(p["name"] == f"{m0}.gate_up_proj" for p in other["params"]), "kind other: not split")

# The naming rule (mfsdp.torch reassembles by it).
check(mx.expert_matrices("x.gate_up_proj", [2, 6, 5]) ==
      [("x.gate_up_proj.0.gate", [3, 5]), ("x.gate_up_proj.0.up", [3, 5]),
       ("x.gate_up_proj.1.gate", [3, 5]), ("x.gate_up_proj.1.up", [3, 5])], "gate_up naming")
check(mx.expert_matrices("x.down_proj", [2, 5, 3]) ==
      [("x.down_proj.0", [5, 3]), ("x.down_proj.1", [5, 3])], "other naming")
check(mx.expert_matrices("x.gate_up_proj", [2, 5, 3]) ==
      [("x.gate_up_proj.0", [5, 3]), ("x.gate_up_proj.1", [5, 3])], "odd gate_up rows: per expert")

# A tied alias whose name would split the tensor into other matrices.
bad = mm.build()
bad["model"].layers[1].mlp.experts.w13 = bad["model"].layers[0].mlp.experts.gate_up_proj
try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mx.export_graph(**bad, units=["layers.*"], device=None)
    check(False, "a tie that splits differently was accepted")
except mx.ExportError as e:
    check("tied to the fused expert tensor 'layers.0.mlp.experts.gate_up_proj'" in str(e)
          and "split_experts=False" in str(e), f"tie error: {e}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("check_moe: all checks passed")
