#!/usr/bin/env python3
"""Export a PyTorch model to mfsdp's model graph, format 1 (docs/graph-format.md).

In a training script:

    import mfsdp_export                      # tools/export/ on sys.path
    with torch.device("meta"):               # no memory for the weights
        model = MyTransformer(cfg)
    ids = torch.zeros(1, 4096, dtype=torch.long, device="meta")
    mfsdp_export.write_graph("model.json", model, units=["layers.*"],
                             example_inputs=(ids,), name="my-model")

From a shell, with a Python file whose function builds the model:

    python3 tools/export/mfsdp_export.py my_model.py:build --units 'layers.*' -o model.json

What it measures, on the example inputs (on the meta device unless
device=None): the forward FLOPs of each unit with
torch.utils.flop_counter.FlopCounterMode between forward hooks, the backward
FLOPs by running backward under the same counter (between gradient hooks),
and the bytes autograd saves for backward (saved-tensor hooks). Everything is
divided by the number of tokens in the example.
"""

import argparse
import copy
import difflib
import importlib.util
import json
import math
import os
import re
import sys
import warnings
from collections.abc import Mapping

with warnings.catch_warnings():
    # torch warns on import when NumPy is missing; the exporter never needs it.
    warnings.filterwarnings("ignore", message=".*NumPy.*")
    import torch
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

__all__ = ["export_graph", "write_graph", "dumps", "expert_matrices", "ExportError", "KINDS"]

FORMAT = "mfsdp.graph"
VERSION = 1
KINDS = ("linear", "embedding", "output", "norm", "router", "expert", "other")
DP_DIMS = ("dp_shard", "dp_replicate")

_DTYPES = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
}
for _name, _fmt in (("float8_e4m3fn", "f8e4m3fn"), ("float8_e5m2", "f8e5m2")):
    if hasattr(torch, _name):
        _DTYPES[getattr(torch, _name)] = _fmt
_FORMAT_DTYPES = ("f64", "f32", "bf16", "f16", "f8e4m3fn", "f8e5m2")

# Last name components that make a linear the output head or the MoE router.
_OUTPUT_NAMES = {"lm_head", "output", "head", "output_layer", "out_head", "output_proj_vocab"}
_ROUTER_NAMES = {"gate", "router", "gating", "gate_network", "moe_gate"}
_EXPERT_NAMES = {"experts", "routed_experts", "local_experts"}


class ExportError(ValueError):
    """A problem with the arguments or the model; the message says what."""


# ---------------------------------------------------------------- patterns

def _pattern_regex(pattern):
    """Name patterns: `*` is any run of characters but '.', `**` any run at
    all, `?` one character but '.'; everything else is literal."""
    out = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^.]*")
        elif c == "?":
            out.append("[^.]")
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def _is_pattern(s):
    return "*" in s or "?" in s


def _suggest(name, names):
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if close:
        return "; did you mean " + ", ".join(repr(c) for c in close) + "?"
    shown = [n for n in names if n][:8]
    more = ", ..." if len([n for n in names if n]) > 8 else ""
    return "; submodules are " + ", ".join(repr(n) for n in shown) + more


def _parent(name):
    return name.rsplit(".", 1)[0] if "." in name else ""


def _is_ancestor(a, b):
    """Module path a strictly contains module path b."""
    return a != b and (a == "" or b.startswith(a + "."))


# ---------------------------------------------------------------- arguments

def _select_units(model, units):
    """Unit module names, from names/patterns, module classes or a callable."""
    modules = dict(model.named_modules())
    names = list(modules)
    selected = []  # (name, how it was asked for)
    if isinstance(units, str):
        units = [units]
    if callable(units) and not isinstance(units, type):
        for n, m in modules.items():
            if n == "":
                continue
            if units(n, m):
                selected.append((n, "the units callable"))
        if not selected:
            raise ExportError("units: the callable selected no submodule (it is called as "
                              "units(name, module) for every submodule and must return True "
                              "for the units)")
    elif isinstance(units, type) and issubclass(units, nn.Module):
        units = [units]
    if not selected:
        if not isinstance(units, (list, tuple)):
            raise ExportError(
                "units: expected a list of submodule names or patterns (e.g. ['layers.*']), "
                "module classes, or a callable (name, module) -> bool; got "
                f"{type(units).__name__}")
        if len(units) == 0:
            raise ExportError("units: the list is empty; name at least one submodule "
                              "(e.g. each transformer block: ['layers.*'])")
        for i, u in enumerate(units):
            where = f"units[{i}]"
            if isinstance(u, type) and issubclass(u, nn.Module):
                hits = [n for n, m in modules.items() if n and isinstance(m, u)]
                if not hits:
                    raise ExportError(f"{where}: no submodule is a {u.__name__}")
                selected += [(n, where) for n in hits]
            elif isinstance(u, str):
                if u == "":
                    raise ExportError(f"{where}: '' is the whole model; units are submodules "
                                      "(parameters outside every unit get units of their own)")
                if _is_pattern(u):
                    rx = _pattern_regex(u)
                    hits = [n for n in names if n and rx.match(n)]
                    if not hits:
                        raise ExportError(f"{where}: the pattern {u!r} matches no submodule"
                                          + _suggest(u, names))
                    selected += [(n, where) for n in hits]
                elif u not in modules:
                    raise ExportError(f"{where}: no submodule named {u!r}" + _suggest(u, names))
                else:
                    selected.append((u, where))
            else:
                raise ExportError(f"{where}: expected a submodule name (str) or a module class, "
                                  f"got {type(u).__name__} {u!r}")
    # One unit per module object, first name wins.
    seen = {}
    result = []
    for n, how in selected:
        key = id(modules[n])
        if key in seen:
            continue
        seen[key] = n
        result.append((n, how))
    for a, how_a in result:
        for b, how_b in result:
            if _is_ancestor(a, b):
                raise ExportError(
                    f"units: {a!r} ({how_a}) contains {b!r} ({how_b}); units must not nest, "
                    "since every parameter is in exactly one unit")
    return result


def _parse_mesh(mesh):
    if mesh is None:
        return None
    if isinstance(mesh, str):
        dims = []
        for part in mesh.split(","):
            k, sep, v = part.partition("=")
            if not sep or not v.strip().isdigit():
                raise ExportError(f"mesh: expected NAME=SIZE[,NAME=SIZE...], got {mesh!r}")
            dims.append((k.strip(), int(v)))
    elif isinstance(mesh, Mapping) and "dims" in mesh:
        out = {"dims": [{"name": d["name"], "size": int(d["size"])} for d in mesh["dims"]]}
        if "device_ids" in mesh and mesh["device_ids"] is not None:
            out["device_ids"] = [int(x) for x in mesh["device_ids"]]
        dims = [(d["name"], d["size"]) for d in out["dims"]]
        _check_mesh(dims)
        return out
    elif isinstance(mesh, Mapping):
        dims = list(mesh.items())
    elif isinstance(mesh, (list, tuple)):
        dims = [tuple(d) for d in mesh]
    else:
        raise ExportError(f"mesh: expected 'dp_shard=8,ep=2', {{'dp_shard': 8}} or "
                          f"{{'dims': [...]}}, got {type(mesh).__name__}")
    _check_mesh(dims)
    return {"dims": [{"name": str(n), "size": int(s)} for n, s in dims]}


def _check_mesh(dims):
    names = [n for n, _ in dims]
    if "dp_shard" not in names:
        raise ExportError(f"mesh: a dp_shard dim is required, got {', '.join(names) or 'none'}")
    if len(set(names)) != len(names):
        raise ExportError(f"mesh: a dim is named twice: {', '.join(names)}")
    for n, s in dims:
        if int(s) < 1:
            raise ExportError(f"mesh: dim {n!r} has size {s}; sizes are >= 1")


def _match_overrides(what, overrides, params, check):
    """{pattern: value} against parameter names, then module names."""
    result = {}
    if not overrides:
        return result
    if not isinstance(overrides, Mapping):
        raise ExportError(f"{what}: expected a dict {{name or pattern: value}}, "
                          f"got {type(overrides).__name__}")
    for pat, value in overrides.items():
        value = check(pat, value)
        rx = _pattern_regex(pat)
        hits = [p["name"] for p in params if rx.match(p["name"]) or rx.match(p["module"])]
        if not hits:
            raise ExportError(f"{what}: {pat!r} matches no parameter or module name"
                              + _suggest(pat, [p["name"] for p in params]).replace(
                                  "submodules are", "parameters are"))
        for h in hits:
            result[h] = value
    return result


def _dtype_name(dtype, where):
    if isinstance(dtype, str):
        if dtype in _FORMAT_DTYPES:
            return dtype
        alias = getattr(torch, dtype, None)
        if isinstance(alias, torch.dtype) and alias in _DTYPES:
            return _DTYPES[alias]
    elif isinstance(dtype, torch.dtype) and dtype in _DTYPES:
        return _DTYPES[dtype]
    raise ExportError(f"{where}: dtype {dtype} has no name in format 1 (it has "
                      f"{', '.join(_FORMAT_DTYPES)})")


# ---------------------------------------------------------------- kinds

def _infer_kind(pname, mname, module, tied_primary_kind):
    parts = mname.split(".") if mname else []
    last = parts[-1] if parts else ""
    cls = type(module).__name__
    if any(p in _EXPERT_NAMES for p in parts):
        return "expert"
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return "embedding"
    norm_types = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase, nn.LocalResponseNorm)
    if hasattr(nn, "RMSNorm"):
        norm_types = norm_types + (nn.RMSNorm,)
    if isinstance(module, norm_types) or "Norm" in cls or "norm" in last.lower():
        return "norm"
    if last in _ROUTER_NAMES or "Router" in cls:
        return "router"
    if isinstance(module, nn.Linear) or "Linear" in cls:
        if last in _OUTPUT_NAMES or tied_primary_kind == "embedding":
            return "output"
        return "linear"
    return "other"


# ---------------------------------------------------------------- fused experts

def expert_matrices(name, shape):
    """The 2-D matrices a fused expert tensor `name` [E, A, B] is written as,
    as (name, shape), e-major: for gate_up_proj (A even) each expert's gate
    rows, then its up rows (transformers 5: linear(x, gate_up_proj[e]).chunk(2,
    dim=-1)), `name.{e}.gate` and `name.{e}.up` [A/2, B]; for any other name
    `name.{e}` [A, B]. mfsdp.torch puts the tensor back together by exactly
    this naming."""
    experts, rows, cols = shape
    if name.rpartition(".")[2] == "gate_up_proj" and rows % 2 == 0:
        out = []
        for e in range(experts):
            out.append((f"{name}.{e}.gate", [rows // 2, cols]))
            out.append((f"{name}.{e}.up", [rows // 2, cols]))
        return out
    return [(f"{name}.{e}", [rows, cols]) for e in range(experts)]


def _split_experts(params):
    """{parameter name: its matrices} for every 3-D `expert` parameter, and for
    each alias of one (its matrices tied to the primary's, one by one)."""
    split = {}
    for p in params:
        if "tied_to" not in p and p["kind"] == "expert" and len(p["shape"]) == 3:
            split[p["name"]] = expert_matrices(p["name"], p["shape"])
    for p in params:
        if "tied_to" in p and p["tied_to"] in split:
            mine = expert_matrices(p["name"], p["shape"])
            theirs = split[p["tied_to"]]
            if [s for _, s in mine] != [s for _, s in theirs]:
                raise ExportError(
                    f"parameter {p['name']!r}: tied to the fused expert tensor "
                    f"{p['tied_to']!r}, but its name splits it into other matrices "
                    f"({len(mine)} of {mine[0][1]} against {len(theirs)} of {theirs[0][1]}); "
                    "pass split_experts=False (--no-split-experts)")
            split[p["name"]] = mine
    return split


# ---------------------------------------------------------------- measuring

def _leaves(x, out):
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, Mapping):
        for v in x.values():
            _leaves(v, out)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _leaves(v, out)
    return out


def _map_tensors(x, fn):
    if isinstance(x, torch.Tensor):
        return fn(x)
    if isinstance(x, Mapping):
        return type(x)((k, _map_tensors(v, fn)) for k, v in x.items())
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*[_map_tensors(v, fn) for v in x])
    if isinstance(x, (list, tuple)):
        return type(x)(_map_tensors(v, fn) for v in x)
    return x


def _storage_key(t):
    try:
        return t.untyped_storage()._cdata
    except Exception:  # tensor subclasses without a storage
        return id(t)


def _storage_bytes(t):
    try:
        return t.untyped_storage().nbytes()
    except Exception:
        return t.numel() * t.element_size()


def _meta_copy(model):
    """A copy of the model on the meta device that allocates nothing for its
    parameters and buffers (ties are kept: one meta tensor per original)."""
    memo = {}
    for t in list(model.parameters()) + list(model.buffers()):
        if id(t) in memo:
            continue
        mt = torch.empty_like(t, device="meta")
        if isinstance(t, nn.Parameter):
            mt = nn.Parameter(mt, requires_grad=t.requires_grad)
        memo[id(t)] = mt
    return copy.deepcopy(model, memo)


def _default_loss(output):
    loss = None
    if isinstance(output, Mapping) and isinstance(output.get("loss"), torch.Tensor):
        loss = output["loss"]
    elif isinstance(getattr(output, "loss", None), torch.Tensor):
        loss = output.loss
    else:
        for t in _leaves(output, []):
            if t.is_floating_point() and t.requires_grad:
                loss = t
                break
    if loss is None:
        raise ExportError("backward: no output of the model requires grad; pass loss_fn= "
                          "(a function of the output returning a scalar) or backward=False")
    return loss.float().sum() if loss.dim() else loss


class _Recorder:
    """Splits the FLOPs and saved bytes of one forward and backward into
    segments owned by cost keys (unit modules and the modules holding the
    parameters outside the units), or by nobody (gaps)."""

    def __init__(self, counter, skip_storages):
        self.counter = counter
        self.skip = skip_storages
        self.phase = "fwd"
        self.last = 0
        self.segments = {"fwd": [], "bwd": []}  # [key or None, flops, bytes]
        self.fwd_stack = []
        self.bwd_stack = []  # call records: [key, open_ended]
        self.saved = set()
        self.pending_bytes = 0
        self.inputs = {}  # key -> bytes of floating inputs (for recompute)
        self.order = {}  # module name -> first forward call index

    def _owner(self):
        if self.phase == "fwd":
            return self.fwd_stack[-1] if self.fwd_stack else None
        return self.bwd_stack[-1][0] if self.bwd_stack else None

    def cut(self):
        now = self.counter.get_total_flops()
        flops, self.last = now - self.last, now
        nbytes, self.pending_bytes = self.pending_bytes, 0
        segs = self.segments[self.phase]
        owner = self._owner()
        if segs and segs[-1][0] == owner:
            segs[-1][1] += flops
            segs[-1][2] += nbytes
        else:
            segs.append([owner, flops, nbytes])

    def pack(self, t):
        key = _storage_key(t)
        if key not in self.skip and key not in self.saved:
            self.saved.add(key)
            self.pending_bytes += _storage_bytes(t)
        return t

    def hook(self, module, key):
        def pre(mod, args, kwargs):
            self.cut()
            self.fwd_stack.append(key)
            nbytes = 0
            seen = set()
            grads_in = []
            for t in _leaves((args, kwargs), []):
                if t.is_floating_point() and _storage_key(t) not in seen:
                    seen.add(_storage_key(t))
                    nbytes += _storage_bytes(t)
                if t.requires_grad:
                    grads_in.append(t)
            self.inputs[key] = self.inputs.get(key, 0) + nbytes
            record = [key, not grads_in, False]
            mod._mfsdp_export_record = record
            for t in grads_in:
                t.register_hook(self._bwd_end(record))
            return None

        def post(mod, args, kwargs, output):
            self.cut()
            self.fwd_stack.pop()
            record = mod._mfsdp_export_record
            for t in _leaves(output, []):
                if t.requires_grad and t.grad_fn is not None:
                    t.register_hook(self._bwd_start(record))
            return None

        return [module.register_forward_pre_hook(pre, with_kwargs=True),
                module.register_forward_hook(post, with_kwargs=True)]

    def _bwd_start(self, record):
        def h(grad):
            if not record[2]:
                record[2] = True
                self.cut()
                self.bwd_stack = [r for r in self.bwd_stack if not r[1]]
                self.bwd_stack.append(record)
        return h

    def _bwd_end(self, record):
        def h(grad):
            if record in self.bwd_stack:
                self.cut()
                self.bwd_stack = [r for r in self.bwd_stack if r is not record]
        return h


def _resolve(segments, forward):
    """Per key: FLOPs and bytes, gaps given to a neighbour: in forward to the
    key that ran before (or the first one, for what runs before any), in
    backward to the key that runs after (the same code's forward neighbour)."""
    owners = [s[0] for s in segments]
    totals = {}
    n = len(segments)
    for i, (key, flops, nbytes) in enumerate(segments):
        if key is None:
            before = next((owners[j] for j in range(i - 1, -1, -1) if owners[j] is not None), None)
            after = next((owners[j] for j in range(i + 1, n) if owners[j] is not None), None)
            key = (before if before is not None else after) if forward else \
                  (after if after is not None else before)
        if key is None:
            continue
        f, b = totals.get(key, (0, 0))
        totals[key] = (f + flops, b + nbytes)
    return totals


# ---------------------------------------------------------------- export

def export_graph(model, units, example_inputs, name, seq_len=None, mesh=None, recompute=False,
                 *, example_kwargs=None, kinds=None, owned_by=None, dtype=None, policy=None,
                 tokens=None, loss_fn=None, backward=True, device="meta", rest="groups",
                 split_experts=True):
    """Describe `model` as an mfsdp graph (format 1) and return it as a dict.

    units: the submodules that become units, in any order (they are sorted
        into forward order): names or patterns (`*` does not cross a '.',
        `**` does: 'layers.*' is every block), module classes, or a callable
        (name, module) -> bool. Units must not nest and must hold a parameter.
    example_inputs: the positional inputs of one forward (a tensor or a
        tuple; a dict is taken as keyword inputs); example_kwargs: more
        keyword inputs. Costs are per token of these inputs.
    name: the model name. seq_len: the sequence length the costs assume
        (default: the last dim of the first integer input).
    mesh: 'dp_shard=8,ep=2', {'dp_shard': 8, 'ep': 2} or a format-1 mesh.
    recompute: True (every listed unit) or a list of unit names whose
        activations are recomputed in backward; their activation bytes are
        then their inputs only.
    kinds: {name or pattern: kind} overriding the inferred kind of
        parameters (matched against parameter and module names).
    owned_by: {name or pattern: dim or [dims]}: parameters a TP/EP stack owns.
    dtype: one dtype for every parameter (e.g. 'bf16' when a fp32 model
        trains in bf16); default: each parameter's own.
    policy: a format-1 policy object, copied as is.
    tokens: tokens in the example (default: elements of the first integer
        input, or of a float input but its last dim).
    loss_fn: output -> scalar to run backward from (default: the output's
        `loss`, or the sum of its first floating tensor that requires grad);
        backward=False skips backward and estimates it as 2x forward.
    device: 'meta' (default) measures on a parameter-free meta copy; None
        measures the model where it is (needed for data-dependent code such
        as MoE routing; gradients the run produces are discarded).
    rest: 'groups' (default): parameters outside the units form units of
        their own, one per run of consecutive modules between units in forward
        order, named after the group's last module; 'root': all of them form
        one unit, 'root', gathered first (FSDP2's root module).
    split_experts: True (default): a 3-D parameter of kind 'expert' [E, A, B]
        (transformers 5's fused experts) is written as its 2-D matrices, in its
        place and unit, each with its module, kind, dtype and owners (see
        expert_matrices()), so that Muon and the owner balancer treat every
        expert's matrices on their own; an alias of one is split alike. False
        keeps the 3-D tensor (planned as one tensor, with AdamW).
    """
    if not isinstance(model, nn.Module):
        raise ExportError(f"model: expected a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(name, str) or not name:
        raise ExportError("name: expected a non-empty model name")
    if rest not in ("groups", "root"):
        raise ExportError(f"rest: expected 'groups' or 'root', got {rest!r}")
    unit_sel = _select_units(model, units)
    unit_names = [n for n, _ in unit_sel]
    mesh_obj = _parse_mesh(mesh)
    mesh_dims = [d["name"] for d in mesh_obj["dims"]] if mesh_obj else None

    # Parameters, ties (by tensor identity; the first name holds the storage).
    modules = dict(model.named_modules(remove_duplicate=False))
    params = []
    first = {}
    for pname, p in model.named_parameters(remove_duplicate=False):
        mname = _parent(pname)
        entry = {"name": pname, "module": mname, "_tensor": p}
        if id(p) in first:
            entry["tied_to"] = first[id(p)]["name"]
        else:
            first[id(p)] = entry
        params.append(entry)
    if not params:
        raise ExportError("model: it has no parameters")
    by_name = {p["name"]: p for p in params}

    for p in params:
        t = p["_tensor"]
        shape = list(t.shape)
        if not shape:
            shape = [1]  # a scalar parameter: format 1 has no rank-0 shapes
        if any(d == 0 for d in shape):
            raise ExportError(f"parameter {p['name']!r}: shape {list(t.shape)} has an empty dim")
        p["shape"] = shape
        p["dtype"] = _dtype_name(dtype, "dtype") if dtype is not None else \
            _dtype_name(t.dtype, f"parameter {p['name']!r}")
        p["requires_grad"] = bool(t.requires_grad)
    for p in params:  # primaries first: an alias's kind may follow its primary's
        if "tied_to" not in p:
            p["kind"] = _infer_kind(p["name"], p["module"], modules[p["module"]], None)
    for p in params:
        if "tied_to" in p:
            p["kind"] = _infer_kind(p["name"], p["module"], modules[p["module"]],
                                    by_name[p["tied_to"]]["kind"])

    def check_kind(pat, k):
        if k not in KINDS:
            raise ExportError(f"kinds: {pat!r}: unknown kind {k!r} (kinds are {', '.join(KINDS)})")
        return k

    def check_owned(pat, dims):
        dims = [dims] if isinstance(dims, str) else list(dims)
        if not dims:
            raise ExportError(f"owned_by: {pat!r}: no dims given")
        for d in dims:
            if d in DP_DIMS:
                raise ExportError(f"owned_by: {pat!r}: {d} is a data-parallel dim; owners are "
                                  "tensor/expert-parallel dims (tp, ep, ...)")
            if mesh_dims is not None and d not in mesh_dims:
                raise ExportError(f"owned_by: {pat!r}: the mesh has no dim {d!r}")
        if len(set(dims)) != len(dims):
            raise ExportError(f"owned_by: {pat!r}: a dim is named twice")
        return dims

    for pname, k in _match_overrides("kinds", kinds, params, check_kind).items():
        by_name[pname]["kind"] = k
    for pname, dims in _match_overrides("owned_by", owned_by, params, check_owned).items():
        if "tied_to" not in by_name[pname]:
            by_name[pname]["owned_by"] = dims

    # Which unit holds each parameter that has storage.
    holder = {}
    for p in params:
        if "tied_to" in p:
            continue
        for u in unit_names:
            if _is_ancestor(u, p["name"]):
                holder[p["name"]] = u
                break
    for u, how in unit_sel:
        if not any(h == u for h in holder.values()):
            aliases = [p["name"] for p in params if "tied_to" in p and _is_ancestor(u, p["name"])]
            extra = (f" (its {', '.join(aliases)} is tied to a parameter elsewhere)"
                     if aliases else "")
            raise ExportError(f"units: {u!r} ({how}) holds no parameter of its own{extra}; "
                              "a unit needs at least one")
    if isinstance(recompute, bool):
        recompute_units = set(unit_names) if recompute else set()
    else:
        recompute_units = set(recompute)
        unknown = recompute_units - set(unit_names)
        if unknown:
            raise ExportError(f"recompute: {', '.join(sorted(unknown))} is not a unit "
                              f"(units: {', '.join(unit_names)})")

    # Cost keys: unit modules, and the modules holding the other parameters
    # unless they contain a unit (the root, say: their compute is a gap).
    rest_modules = []
    for p in params:
        if "tied_to" not in p and p["name"] not in holder:
            m = p["module"]
            if m not in rest_modules and not any(_is_ancestor(m, u) or m == u for u in unit_names):
                rest_modules.append(m)

    # The model to run, and its inputs.
    if example_kwargs is None:
        example_kwargs = {}
    if isinstance(example_inputs, Mapping):
        example_kwargs = {**example_inputs, **example_kwargs}
        example_inputs = ()
    elif isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    elif example_inputs is None:
        example_inputs = ()
    elif not isinstance(example_inputs, (list, tuple)):
        raise ExportError("example_inputs: expected a tensor, a tuple of inputs or a dict, got "
                          f"{type(example_inputs).__name__}")
    example_inputs = tuple(example_inputs)
    all_inputs = _leaves((example_inputs, example_kwargs), [])
    if not all_inputs:
        raise ExportError("example_inputs: no tensor among them")

    if tokens is None:
        t0 = all_inputs[0]
        if not t0.is_floating_point() and not t0.is_complex():
            tokens = t0.numel()
            inferred_seq = t0.shape[-1] if t0.dim() else 1
        elif t0.dim() >= 2:
            tokens = t0.numel() // t0.shape[-1]
            inferred_seq = t0.shape[-2]
        else:
            raise ExportError("tokens: cannot tell how many tokens the example inputs hold; "
                              "pass tokens=")
    else:
        inferred_seq = None
    tokens = int(tokens)
    if tokens <= 0:
        raise ExportError(f"tokens: expected a positive count, got {tokens}")
    if seq_len is None:
        seq_len = int(inferred_seq) if inferred_seq is not None else 0
    elif inferred_seq is not None and int(seq_len) != int(inferred_seq):
        warnings.warn(f"seq_len={seq_len} but the example inputs have sequences of "
                      f"{inferred_seq}; costs are measured at {inferred_seq} (attention "
                      "FLOPs grow with it: on the meta device full-length inputs cost nothing)")
    if int(seq_len) < 0:
        raise ExportError(f"seq_len: expected >= 0, got {seq_len}")

    saved_grads = None
    if device == "meta":
        run_model = model
        if any(t.device.type != "meta" for t in list(model.parameters()) + list(model.buffers())):
            try:
                run_model = _meta_copy(model)
            except Exception as e:
                raise ExportError(f"device='meta': the model cannot be copied to the meta device "
                                  f"({type(e).__name__}: {e}); pass device=None") from e
        to_meta = lambda t: t.to("meta")
        run_args = _map_tensors(example_inputs, to_meta)
        run_kwargs = _map_tensors(example_kwargs, to_meta)
    elif device is None:
        run_model = model
        run_args, run_kwargs = example_inputs, example_kwargs
        saved_grads = [(p, p.grad) for p in model.parameters()]
        for p, _ in saved_grads:
            p.grad = None
        # Running the live model must leave it as it was: its buffers
        # (BatchNorm statistics, counters) and the random number generator.
        saved_buffers = [(b, b.detach().clone()) for b in model.buffers()]
        saved_rng = torch.random.get_rng_state()
    else:
        raise ExportError(f"device: expected 'meta' or None, got {device!r}")

    run_modules = dict(run_model.named_modules())
    skip = set()
    for t in list(run_model.parameters()) + list(run_model.buffers()):
        skip.add(_storage_key(t))
    counter = FlopCounterMode(display=False)
    rec = _Recorder(counter, skip)
    handles = []
    try:
        for key in unit_names + rest_modules:
            handles += rec.hook(run_modules[key], key)
        for mname, m in run_modules.items():
            def order_hook(mod, args, mname=mname):
                rec.order.setdefault(mname, len(rec.order))
            handles.append(m.register_forward_pre_hook(order_hook))
        with counter, torch.autograd.graph.saved_tensors_hooks(rec.pack, lambda t: t):
            try:
                with torch.enable_grad():
                    output = run_model(*run_args, **run_kwargs)
                rec.cut()
                if backward:
                    rec.phase = "bwd"
                    rec.last = counter.get_total_flops()
                    loss = loss_fn(output) if loss_fn is not None else _default_loss(output)
                    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                        raise ExportError("loss_fn: expected a scalar tensor")
                    loss.backward()
                    rec.cut()
            except ExportError:
                raise
            except Exception as e:
                hint = (" (on the meta device; code that reads tensor values, such as MoE "
                        "routing, needs device=None)" if device == "meta" else "")
                raise ExportError(f"running the model on the example inputs failed{hint}: "
                                  f"{type(e).__name__}: {e}") from e
    finally:
        for h in handles:
            h.remove()
        for m in run_modules.values():
            if hasattr(m, "_mfsdp_export_record"):
                del m._mfsdp_export_record
        if saved_grads is not None:
            for p, g in saved_grads:
                p.grad = g
            with torch.no_grad():
                for b, copy in saved_buffers:
                    b.copy_(copy)
            torch.random.set_rng_state(saved_rng)

    fwd = _resolve(rec.segments["fwd"], forward=True)
    bwd = _resolve(rec.segments["bwd"], forward=False)

    # Units in forward order: listed ones, and runs of the other parameters.
    never = len(rec.order) + 1
    items = []  # (position, index, kind, payload)
    for i, u in enumerate(unit_names):
        pos = rec.order.get(u, never)
        if pos == never:
            warnings.warn(f"unit {u!r} never ran in the forward pass on the example inputs; "
                          "it is placed last, with no cost")
        items.append((pos, i, "unit", u))
    for i, p in enumerate(params):
        if "tied_to" in p or p["name"] in holder:
            continue
        m = p["module"]
        pos = rec.order.get(m, never)
        if pos == never:
            warnings.warn(f"parameter {p['name']!r}: its module never ran in the forward pass "
                          "on the example inputs; it goes into the last unit")
        if rest == "root":
            pos = -1
        items.append((pos, len(unit_names) + i, "param", p))
    items.sort(key=lambda x: (x[0], x[1]))
    groups = []  # [name, [param names], [cost keys], listed?]
    for _, _, what, payload in items:
        if what == "unit":
            groups.append([payload, [p["name"] for p in params if holder.get(p["name"]) == payload],
                           [payload], True])
        else:
            if not groups or groups[-1][3]:
                groups.append([None, [], [], False])
            g = groups[-1]
            g[1].append(payload["name"])
            key = payload["module"] if payload["module"] in rest_modules else None
            if key is not None and key not in g[2]:
                g[2].append(key)
            g[0] = "root" if rest == "root" else (payload["module"] or "root")
    # Costs of keys no group claims (modules holding only ties) stay with gaps:
    # they were hooked only when they hold parameters, so every key is claimed.
    taken = set(p["name"] for p in params) | set(g[0] for g in groups if g[3])
    out_units = []
    for g in groups:
        uname = g[0]
        if not g[3]:
            base, n = uname, 2
            while uname in taken:
                uname = f"{base}#{n}"
                n += 1
            taken.add(uname)
        f_flops = sum(fwd.get(k, (0, 0))[0] for k in g[2])
        b_flops = sum(bwd.get(k, (0, 0))[0] for k in g[2])
        is_rc = g[3] and g[0] in recompute_units
        if is_rc:
            act = sum(rec.inputs.get(k, 0) for k in g[2])
        else:
            act = sum(fwd.get(k, (0, 0))[1] for k in g[2])
        if not backward:
            b_flops = 2 * f_flops
        cost = {
            "fwd_flops_per_token": float(f_flops) / tokens,
            "bwd_flops_per_token": float(b_flops) / tokens,
            "activation_bytes_per_token": float(act) / tokens,
            "recompute": bool(is_rc),
        }
        for k, v in cost.items():
            if isinstance(v, float) and not math.isfinite(v):
                raise ExportError(f"unit {uname!r}: {k} is not finite")
        out_units.append({"name": uname, "params": g[1], "cost": cost})

    split = _split_experts(params) if split_experts else {}
    out_params = []
    for p in params:
        pieces = split.get(p["name"], [(p["name"], p["shape"])])
        for k, (pname, shape) in enumerate(pieces):
            e = {"name": pname, "shape": shape, "dtype": p["dtype"], "module": p["module"],
                 "kind": p["kind"]}
            if not p["requires_grad"]:
                e["requires_grad"] = False
            if "tied_to" in p:
                e["tied_to"] = split[p["tied_to"]][k][0] if p["name"] in split else p["tied_to"]
            if "owned_by" in p:
                e["owned_by"] = p["owned_by"]
            out_params.append(e)
    if split:
        for u in out_units:
            u["params"] = [n for fused in u["params"]
                           for n, _ in split.get(fused, [(fused, None)])]

    graph = {"format": FORMAT, "version": VERSION, "model": name, "seq_len": int(seq_len),
             "params": out_params, "units": out_units}
    if mesh_obj is not None:
        graph["mesh"] = mesh_obj
    if policy is not None:
        if not isinstance(policy, Mapping) or "optimizer" not in policy:
            raise ExportError("policy: expected a format-1 policy object with an 'optimizer'")
        graph["policy"] = dict(policy)
    return graph


def dumps(graph):
    """JSON text of a graph: one parameter and one unit per line."""
    lines = ["{"]
    keys = list(graph)
    for i, k in enumerate(keys):
        comma = "," if i + 1 < len(keys) else ""
        v = graph[k]
        if k in ("params", "units"):
            lines.append(f'  "{k}": [')
            for j, item in enumerate(v):
                lines.append("    " + json.dumps(item) + ("," if j + 1 < len(v) else ""))
            lines.append("  ]" + comma)
        else:
            lines.append(f'  "{k}": ' + json.dumps(v) + comma)
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_graph(path, model, units, example_inputs, name, seq_len=None, mesh=None,
                recompute=False, **kwargs):
    """export_graph(...) written to `path` (format 1 JSON); returns the graph."""
    graph = export_graph(model, units, example_inputs, name, seq_len, mesh, recompute, **kwargs)
    text = dumps(graph)
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return graph


# ---------------------------------------------------------------- CLI

def _load_factory(spec):
    path, sep, func = spec.rpartition(":")
    if not sep or not path or not func:
        raise ExportError(f"{spec}: expected FILE.py:FUNCTION")
    if not os.path.isfile(path):
        raise ExportError(f"{path}: no such file")
    modname = "_mfsdp_export_model_" + re.sub(r"\W", "_", os.path.basename(path))
    s = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(s)
    sys.modules[modname] = mod
    s.loader.exec_module(mod)
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise ExportError(f"{path}: no function {func!r}")
    return fn


def _pairs(items, what):
    out = {}
    for it in items or []:
        k, sep, v = it.partition("=")
        if not sep or not k or not v:
            raise ExportError(f"{what}: expected PATTERN=VALUE, got {it!r}")
        out[k] = v
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="mfsdp_export.py",
        description="Export a PyTorch model to mfsdp's model graph, format 1 "
                    "(docs/graph-format.md). FILE.py:FUNCTION is called with no arguments and "
                    "returns either a dict of export_graph() arguments (model, units, "
                    "example_inputs, name, ...) or a tuple (model, example_inputs); options "
                    "given here override the dict.")
    ap.add_argument("factory", metavar="FILE.py:FUNCTION")
    ap.add_argument("-o", "--output", default="-", help="output JSON file (default: stdout)")
    ap.add_argument("--units", action="append",
                    help="unit submodules, comma-separated names or patterns ('*' stops at "
                         "'.', '**' does not); repeatable")
    ap.add_argument("--name", help="model name (default: the function's, or the file's)")
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--tokens", type=int)
    ap.add_argument("--mesh", help="e.g. dp_shard=8,ep=2")
    ap.add_argument("--recompute", action="store_true",
                    help="activation checkpointing on every listed unit")
    ap.add_argument("--dtype", help="one dtype for every parameter (bf16, f32, ...)")
    ap.add_argument("--kind", action="append", metavar="PATTERN=KIND",
                    help="override the kind of matching parameters/modules; repeatable")
    ap.add_argument("--owned-by", action="append", metavar="PATTERN=DIM[,DIM]",
                    help="mark matching parameters as owned by TP/EP dims; repeatable")
    ap.add_argument("--device", choices=["meta", "none"],
                    help="measure on the meta device (default) or where the model is")
    ap.add_argument("--rest", choices=["groups", "root"],
                    help="units for the parameters outside the units (default: groups)")
    ap.add_argument("--no-backward", action="store_true",
                    help="do not run backward; estimate it as 2x forward")
    ap.add_argument("--no-split-experts", action="store_true",
                    help="keep 3-D expert tensors (transformers 5's fused experts) whole "
                         "instead of writing each as its matrices")
    args = ap.parse_args(argv)
    try:
        fn = _load_factory(args.factory)
        made = fn()
        if isinstance(made, Mapping):
            kw = dict(made)
        elif isinstance(made, (tuple, list)) and len(made) == 2:
            kw = {"model": made[0], "example_inputs": made[1]}
        else:
            raise ExportError(f"{args.factory}: expected a dict of export_graph() arguments or "
                              "(model, example_inputs)")
        if args.units:
            kw["units"] = [u.strip() for spec in args.units for u in spec.split(",") if u.strip()]
        if "units" not in kw:
            raise ExportError("units: none given (--units, or 'units' in the returned dict)")
        if args.name:
            kw["name"] = args.name
        kw.setdefault("name", fn.__name__ if fn.__name__ not in ("build", "main", "make")
                      else os.path.splitext(os.path.basename(args.factory.rpartition(":")[0]))[0])
        for opt, key in (("seq_len", "seq_len"), ("tokens", "tokens"), ("mesh", "mesh"),
                         ("dtype", "dtype"), ("rest", "rest")):
            if getattr(args, opt) is not None:
                kw[key] = getattr(args, opt)
        if args.recompute:
            kw["recompute"] = True
        if args.device is not None:
            kw["device"] = None if args.device == "none" else "meta"
        if args.no_backward:
            kw["backward"] = False
        if args.no_split_experts:
            kw["split_experts"] = False
        if args.kind:
            kw["kinds"] = {**kw.get("kinds", {}), **_pairs(args.kind, "--kind")}
        if args.owned_by:
            owned = {k: v.split(",") for k, v in _pairs(args.owned_by, "--owned-by").items()}
            kw["owned_by"] = {**kw.get("owned_by", {}), **owned}
        model = kw.pop("model")
        graph = export_graph(model, **kw)
        text = dumps(graph)
        if args.output == "-":
            sys.stdout.write(text)
        else:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(text)
    except ExportError as e:
        sys.stderr.write(f"mfsdp_export: error: {e}\n")
        return 1
    except (KeyError, TypeError, ValueError, OSError) as e:
        # A factory or option of the wrong shape: a message, not a traceback.
        sys.stderr.write(f"mfsdp_export: error: {type(e).__name__}: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
