"""PyTorch through a compiled step library: `fully_shard`, in FSDP2's shape.

    import mfsdp.torch
    model, optimizer = mfsdp.torch.fully_shard(model, mesh="dp_shard=2",
                                               policy="mixed_muon_adamw", zero=3)
    for batch in data:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

The model is exported (tools/export/mfsdp_export.py), compiled by mfsdp-compile into
a step library, loaded, and hooked: each unit's parameters are gathered by the
runtime before its forward and backward, its gradients reduced when autograd has
finished them, and the optimizer runs in the runtime on each rank's shards and owned
matrices. docs/torch.md describes the protocol; docs/runtime.md the runtime under it.
"""

import atexit
import contextlib
import fnmatch
import gc
import itertools
import json
import math
import os
import shutil
import tempfile
import weakref

import torch
from torch import nn
from torch.autograd.graph import register_multi_grad_hook, saved_tensors_hooks

from . import Error, _C
from . import runtime as _rt

__all__ = ["fully_shard", "MixedPrecisionPolicy", "MFSDPModule", "MFSDPOptimizer", "clip_grad_norm_", "Error"]

_OPT_NAMES = {_C.OPT_ADAMW: "adamw", _C.OPT_SGD: "sgd", _C.OPT_MUON: "muon", _C.OPT_NONE: "none"}

# torch.optim's defaults (torch.optim.AdamW, torch.optim.SGD, torch.optim.Muon).
TORCH_DEFAULTS = {
    "adamw": {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2},
    "sgd": {"lr": 1e-3, "momentum": 0.0, "weight_decay": 0.0, "nesterov": False},
    "muon": {"lr": 1e-3, "weight_decay": 0.1, "momentum": 0.95, "nesterov": True,
             "ns_coefficients": (3.4445, -4.775, 2.0315), "eps": 1e-7, "ns_steps": 5,
             "adjust_lr_fn": None},
}
# mfsdp's own options beside torch's: Muon's Newton-Schulz precision, fp32
# (exact against an fp32 reference) or bf16 (what torch.optim.Muon runs, about
# 11x faster on an H100: docs/benchmarks.md). Its default is the library's
# (mfsdp-compile --ns-precision; fp32 unless compiled otherwise); giving it
# compiles the library with it.
MFSDP_OPTIONS = {"muon": {"ns_precision": "fp32"}}
_NS_PRECISION = {"fp32": _C.NS_PRECISION_FP32, "bf16": _C.NS_PRECISION_BF16}
_ADJUST_LR = {None: _C.ADJUST_LR_ORIGINAL, "original": _C.ADJUST_LR_ORIGINAL,
              "match_rms_adamw": _C.ADJUST_LR_MATCH_RMS_ADAMW,
              "spectral_unclamped": _C.ADJUST_LR_SPECTRAL_UNCLAMPED}


def _check_ns_args(grad, ns_steps):
    """torch.optim.Muon's own checks of its Newton-Schulz arguments."""
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if len(grad.shape) != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")


def newton_schulz_fp32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim.Muon's Newton-Schulz (torch.optim._muon._zeropower_via_newtonschulz)
    with the iterate in fp32 instead of bf16, otherwise the same operations: the
    precision the host runtime iterates in, for comparisons with torch.optim.Muon
    (assign it to torch.optim._muon._zeropower_via_newtonschulz)."""
    _check_ns_args(grad, ns_steps)
    a, b, c = ns_coefficients
    x = grad.to(dtype=torch.float32, copy=True)
    if grad.size(0) > grad.size(1):
        x = x.T
    x.div_(x.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = x @ x.T
        update = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, update, x, beta=a)
    if grad.size(0) > grad.size(1):
        x = x.T
    return x


def newton_schulz_bf16(grad, ns_coefficients, ns_steps, eps):
    """Newton-Schulz in bf16 as the runtime runs it with ns_precision='bf16': X, A and
    B held in bf16, each product from bf16 operands summed in fp32, and each fused
    combination (A = X X^T, B = b A + c A A, X = a X + B X) rounded once to bf16.
    torch.optim.Muon rounds b A and c A A separately before adding them; this is the
    reference for comparisons with the runtime's bf16 (assign it to
    torch.optim._muon._zeropower_via_newtonschulz)."""
    _check_ns_args(grad, ns_steps)
    a, b, c = ns_coefficients
    g = grad.to(dtype=torch.float32, copy=True)
    if grad.size(0) > grad.size(1):
        g = g.T
    x = (g / g.norm().clamp(min=eps)).to(torch.bfloat16).float()
    for _ in range(ns_steps):
        gram = (x @ x.T).to(torch.bfloat16).float()
        update = (b * gram + c * (gram @ gram)).to(torch.bfloat16).float()
        x = (a * x + update @ x).to(torch.bfloat16).float()
    if grad.size(0) > grad.size(1):
        x = x.T
    return x.to(torch.bfloat16)


def _in_backward():
    return torch._C._current_graph_task_id() != -1


# ------------------------------------------------------------------ autograd

class _UnitParams(torch.autograd.Function):
    """Hands a unit's gathered parameters to its forward. Its backward runs once
    autograd has every gradient of them (every use, in any module, summed): it adds
    them into the runtime's gradient buffers and reduces the unit (post_backward)."""

    @staticmethod
    def forward(ctx, state, unit, dummy, *views):
        ctx.state, ctx.unit, ctx.generation = state, unit, state.generation
        # A parameter no use reached gets None, not zeros: torch.optim skips it
        # (mark_no_grad), where a zero gradient would still decay it.
        ctx.set_materialize_grads(False)
        outs = tuple(v.view_as(v) for v in views)
        ctx.mark_non_differentiable(*[o for o, p in zip(outs, unit.params) if not p.requires_grad])
        return outs

    @staticmethod
    def backward(ctx, *grads):
        ctx.state._check_generation(ctx.generation)
        ctx.state._post_backward(ctx.unit, grads)
        return (None, None, None) + (None,) * len(grads)


class _TieCopy(torch.autograd.Function):
    """A tied alias read after its primary's unit was freed: a copy of the primary's
    gathered weight taken at that unit's forward; its gradient is kept and added to
    the primary's gradient buffer before the primary's unit is reduced."""

    @staticmethod
    def forward(ctx, state, tie, dummy, value):
        ctx.state, ctx.tie, ctx.generation = state, tie, state.generation
        return value.view_as(value)

    @staticmethod
    def backward(ctx, grad):
        ctx.state._check_generation(ctx.generation)  # else it would join this forward's
        ctx.state._tie_grad(ctx.tie, grad)
        return None, None, None, None


class _RuntimeGrad(torch.Tensor):
    """The .grad of a model parameter (a placeholder on the meta device) once the
    runtime holds a gradient for it: the gradient itself lives in the runtime,
    sharded and reduced there. Reading its metadata works; computing with it (torch's
    clip_grad_norm_, a gradient norm for logging) raises mfsdp.Error, where a None
    .grad would have let torch.nn.utils.clip_grad_norm_ clip nothing and report 0."""

    @staticmethod
    def of(param, name):
        t = torch.Tensor._make_subclass(
            _RuntimeGrad, torch.empty(param.shape, dtype=param.dtype, device="meta"))
        t._mfsdp_name = name
        return t

    def __repr__(self, *args, **kwargs):
        return f"<gradient of {self._mfsdp_name!r}, held by the mfsdp runtime>"

    def __format__(self, spec):
        return format(repr(self), spec)

    def __dir__(self):
        return object.__dir__(self)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        # Metadata only: a property that hands out the values (.data, .T, .real)
        # would let p.grad.data.mul_(c) do nothing on the meta device.
        prop = getattr(getattr(func, "__self__", None), "__name__", None)
        if (getattr(func, "__name__", "") == "__get__" and prop in _RuntimeGrad._PROPERTIES) \
                or func in _RuntimeGrad._METADATA:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))
        name = next((a._mfsdp_name for a in torch.utils._pytree.tree_leaves((args, kwargs))
                     if isinstance(a, _RuntimeGrad)), "a parameter")
        raise Error(f"{name!r}.grad: the gradient is held by the mfsdp runtime (sharded and "
                    f"reduced there), not by torch, so {getattr(func, '__name__', func)} "
                    "cannot read it. For clipping use model.clip_grad_norm_(max_norm) (or "
                    "mfsdp.torch.clip_grad_norm_(model, max_norm)), not "
                    "torch.nn.utils.clip_grad_norm_, which would clip nothing; "
                    "model.full_state_dict() gives the parameters")


_RuntimeGrad._METADATA = {torch.Tensor.size, torch.Tensor.dim, torch.Tensor.numel,
                          torch.Tensor.nelement, torch.Tensor.element_size,
                          torch.Tensor.is_floating_point, torch.Tensor.is_complex,
                          torch.Tensor.__len__, torch.Tensor.stride,
                          torch.Tensor.is_contiguous, torch.Tensor.get_device,
                          torch.Tensor.type}
_RuntimeGrad._PROPERTIES = {"shape", "dtype", "device", "requires_grad", "is_leaf", "grad_fn",
                            "ndim", "layout", "is_meta", "is_sparse", "is_cuda", "is_cpu",
                            "grad", "names", "_base", "is_quantized", "is_nested",
                            "itemsize", "nbytes"}


class _SavedParam:
    """A saved tensor that lies in a unit's gathered parameter: re-pointed, in
    backward, at the same place of the backward gather."""
    __slots__ = ("index", "size", "stride", "offset")

    def __init__(self, index, t):
        self.index = index
        self.size = t.size()
        self.stride = t.stride()
        self.offset = t.storage_offset()


# ------------------------------------------------------------------ model side

class _Param:
    __slots__ = ("index", "name", "module", "attr", "shape", "requires_grad", "param", "unit",
                 "slot", "optimizer", "numel", "aliases", "fused", "where")

    def __init__(self, index, name, module, attr, param, unit, optimizer):
        self.index, self.name, self.module, self.attr = index, name, module, attr
        self.param = param
        self.shape = tuple(param.shape)
        self.numel = param.numel()
        self.requires_grad = param.requires_grad
        self.unit = unit
        self.slot = len(unit.params)  # its place in the unit's views and shadows
        self.optimizer = optimizer
        self.aliases = []  # (module, attr, name) of tied aliases
        self.fused = None  # the _Fused tensor this matrix is a piece of
        self.where = None  # its index in the fused tensor


class _Fused:
    """A tensor of several matrices (transformers 5's fused experts, [E, 2I, H] or
    [E, H, I]) that the plan holds as one row per matrix (docs/torch.md)."""
    __slots__ = ("name", "module", "attr", "shape", "param", "pieces")

    def __init__(self, name, module, attr, param):
        self.name, self.module, self.attr, self.param = name, module, attr, param
        self.shape = tuple(param.shape)
        self.pieces = []

    def assemble(self, tensors):
        """The fused tensor from its matrices (differentiable: a copy)."""
        if self.pieces[0].where[1] is None:
            return torch.stack(tensors)
        pairs = [torch.cat(tensors[i:i + 2], 0) for i in range(0, len(tensors), 2)]
        return torch.stack(pairs)


def _split(name, shape):
    """The matrices a fused 3-D tensor is planned as: (name, index) per matrix,
    e-major; gate_up_proj's each expert's gate rows then its up rows."""
    if len(shape) != 3:
        return []
    experts, rows = shape[0], shape[1]
    if name.rpartition(".")[2] == "gate_up_proj" and rows % 2 == 0:
        half = rows // 2
        out = []
        for e in range(experts):
            out.append((f"{name}.{e}.gate", (e, slice(0, half))))
            out.append((f"{name}.{e}.up", (e, slice(half, rows))))
        return out
    return [(f"{name}.{e}", (e, None)) for e in range(experts)]


def _piece(t, where):
    e, rows = where
    return t[e] if rows is None else t[e, rows]


class _Lease:
    """The owner of one forward view of a ZeRO-3 parameter: every tensor over the
    view keeps it (and the runtime) alive, so a lease still alive once the unit is
    freed means that a tensor over memory the runtime reuses escaped."""
    __slots__ = ("step", "__weakref__")

    def __init__(self, step):
        self.step = step


class _Unit:
    __slots__ = ("index", "params", "modules", "state", "views", "shadows", "recomputing",
                 "fused", "leases", "encloses")

    def __init__(self, index):
        self.index = index
        self.fused = []
        self.params = []
        self.modules = []
        self.state = "idle"  # idle, fwd, fwd_done, bwd
        self.views = None
        self.shadows = None
        self.recomputing = False
        self.leases = None  # ZeRO-3 forward: a weak reference to each view's _Lease
        # One of its modules holds parameters of its own and encloses other units'
        # modules (a root module's parameters around the blocks): its forward copy is
        # freed when the first enclosed unit starts, while that module still runs.
        self.encloses = False


class _Tie:
    """A tied alias read outside its primary's unit (module.attr is the primary's
    parameter). A late read is the same for a module's own parameter read after its
    unit was freed within that module's forward (an enclosing module, _Unit.encloses):
    both read a copy of the gathered weight taken before the unit was freed, and the
    copy's gradient is added to the primary's before its unit is reduced."""
    __slots__ = ("primary", "module", "attr", "name", "copy", "grad", "value")

    def __init__(self, primary, module, attr, name):
        self.primary, self.module, self.attr, self.name = primary, module, attr, name
        self.copy = None
        self.grad = None
        self.value = None  # a late read: what module.attr holds until the module ends


def _glob(pattern, name):
    return fnmatch.fnmatchcase(name, pattern)


class _State:
    """The hooks of one model on one runtime."""

    def __init__(self, model, step, library):
        self.model = model
        self.step = step
        self.library = library
        self.info = library.info()
        self.table = library.params()
        self.params = []
        self.units = [_Unit(u) for u in range(self.info["num_units"])]
        self.ties = []
        self.device = torch.device("cpu")  # the runtime's (fully_shard sets it)
        # Parameters of enclosing modules (_Unit.encloses), each read from a copy
        # once its unit is freed while the module still runs.
        self.late = []
        self.running = set()  # id() of the enclosing modules whose forward runs
        self.external = []  # [(name, Parameter)] the plan leaves to an outer stack
        self.handles = []
        self.ptrs = {}  # storage data_ptr of a gathered forward view -> _Param
        self.hooks_ctx = None
        self.backward_queued = False
        self.grad_forward = False
        self.generation = 0  # forwards so far: a backward belongs to the last one
        self.buffer_modules = []  # modules whose buffers a meta-device init filled
        # Parameters whose torch .grad would not be None: a gradient since the
        # last zero_grad(set_to_none=True) (optimizer.step() keeps .grad).
        self.grad_kept = set()

    # -------------------------------------------------------------- views

    def _views(self, unit, leases=None):
        if leases is None:
            return [self.step.param_view(p.index).view(p.shape) for p in unit.params]
        return [self.step.param_view(p.index, lease).view(p.shape)
                for p, lease in zip(unit.params, leases)]

    def _check_released(self, unit):
        """ZeRO-3, after post_forward freed the unit's forward copy: no tensor over it
        may be left, since the runtime reuses its memory for other units (reading it
        later would read their weights: a silent wrong answer). Tensors autograd saves
        are re-pointed (_pack), so what is left escaped."""
        leases, unit.leases = unit.leases, None
        if not leases or all(w() is None for w in leases):
            return
        gc.collect()  # a reference cycle that holds one is not an escape
        kept = [p.name for p, w in zip(unit.params, leases) if w() is not None]
        if kept and unit.encloses:
            raise Error(f"unit {unit.index}: a tensor over the gathered copy of "
                        f"{', '.join(repr(n) for n in kept[:4])}"
                        f"{', ...' if len(kept) > 4 else ''} is still referenced after "
                        "the unit was freed (post_forward). Its module encloses other "
                        "units and runs around them; under ZeRO-3 a tensor made from its "
                        "parameters before the first enclosed unit starts (an argument "
                        "passed to it, say) would read other units' weights. Read the "
                        "parameter where it is used (the module's own parameters read "
                        "after the enclosed units get copies with their gradients), or "
                        "use zero=2, which keeps one copy all step")
        if kept:
            raise Error(f"unit {unit.index}: a tensor over the gathered copy of "
                        f"{', '.join(repr(n) for n in kept[:4])}"
                        f"{', ...' if len(kept) > 4 else ''} is still referenced after "
                        "the unit was freed (post_forward). Under ZeRO-3 that memory holds "
                        "other units' weights next, so reading the tensor would read them. "
                        "Something kept the parameter or a view of it past its unit's "
                        "forward: a module attribute or a list, a custom autograd Function "
                        "that stores it on ctx instead of ctx.save_for_backward, an output "
                        "that is a view of it. Keep a .detach().clone() instead")

    def _shadow(self, unit, tensors):
        unit.shadows = tensors
        for p, t in zip(unit.params, tensors):
            if p.fused is not None:
                continue
            p.module.__dict__[p.attr] = t
            for (m, a, _) in p.aliases:
                m.__dict__[a] = t
        for f in unit.fused:
            f.module.__dict__[f.attr] = f.assemble([tensors[p.slot] for p in f.pieces])

    def _unshadow(self, unit):
        for p in unit.params:
            if p.fused is None:
                p.module.__dict__.pop(p.attr, None)
            for (m, a, _) in p.aliases:
                m.__dict__.pop(a, None)
        for f in unit.fused:
            f.module.__dict__.pop(f.attr, None)
        unit.shadows = None

    # -------------------------------------------------------------- forward

    def _root_pre(self, module, args, kwargs):
        # A new forward: units left from a forward that had no backward (an
        # evaluation, a graph dropped) are ended first.
        if _in_backward():
            return
        self._check_inputs(args, kwargs)
        # A backward that stopped (an exception) left units in their backward and
        # its end-of-backward callback unrun: they are ended without reducing
        # (mfsdp_end_backward). Units whose post_backward ran hold reduced
        # gradients: the runtime refuses another backward until zero_grad.
        self.backward_queued = False
        for u in self.units:
            if u.state == "bwd":
                self.step.end_backward(u.index)
                self._unshadow(u)
                u.views = None
                u.recomputing = False
                u.state = "idle"
        for u in self.units:
            if u.state in ("fwd", "fwd_done"):
                self.step.end_forward(u.index)
                self._unshadow(u)
                u.state = "idle"
        # The plan was compiled for each parameter's requires_grad at
        # fully_shard: a change since would be ignored (a frozen parameter
        # still stepped, an unfrozen one never), so it is an error.
        for p in self.params:
            if p.param.requires_grad != p.requires_grad:
                raise Error(f"{p.name if p.fused is None else p.fused.name!r}: "
                            f"requires_grad changed to {p.param.requires_grad} after "
                            "fully_shard, which planned it "
                            f"{'trainable' if p.requires_grad else 'frozen'}; set "
                            "requires_grad before fully_shard")
        for t in self.ties + self.late:
            if t.value is not None and t.module.__dict__.get(t.attr) is t.value:
                del t.module.__dict__[t.attr]  # a forward that stopped (an exception)
            t.copy, t.grad, t.value = None, None, None
        self.running.clear()
        self.ptrs.clear()
        self.generation += 1
        self.grad_forward = torch.is_grad_enabled()
        self.hooks_ctx = saved_tensors_hooks(self._pack, self._unpack)
        self.hooks_ctx.__enter__()

    def _check_inputs(self, args, kwargs):
        """Inputs on the meta device (moved to next(model.parameters()).device,
        which is the placeholders' meta) fail with what to use instead, rather
        than deep inside the model."""
        for key, value in itertools.chain(enumerate(args), kwargs.items()):
            inner = value if isinstance(value, (list, tuple)) else \
                value.values() if isinstance(value, dict) else (value,)
            for v in inner:
                if isinstance(v, torch.Tensor) and v.device.type == "meta":
                    where = f"argument {key!r}" if isinstance(key, str) else f"argument {key}"
                    raise Error(f"the forward's {where} is on the meta device: after "
                                "fully_shard the model's parameters are meta placeholders "
                                "(the runtime holds their values), so "
                                "next(model.parameters()).device is meta; move inputs to "
                                f"model.device ({self.device})")

    def _root_post(self, module, args, output):
        if _in_backward():
            return
        try:
            for u in self.units:
                if u.state == "fwd":
                    self._post_forward(u)
        finally:
            # (Also when a post_forward refuses: the saved-tensor hooks are this
            # forward's only.)
            if self.hooks_ctx is not None:
                ctx, self.hooks_ctx = self.hooks_ctx, None
                ctx.__exit__(None, None, None)
        if not self.grad_forward:
            # No backward can follow: every unit is idle again.
            for u in self.units:
                if u.state == "fwd_done":
                    self.step.end_forward(u.index)
                    u.state = "idle"

    def _unit_pre(self, unit, module):
        if _in_backward():
            return self._recompute(unit)
        if unit.state == "fwd":
            return
        if unit.state != "idle":
            raise Error(f"unit {unit.index} ({self._unit_name(unit)}): module "
                        f"{self._module_name(module)!r} runs again after its unit was freed in "
                        "this forward; a unit's modules must run together (one unit at a time): "
                        "put the modules that interleave into one unit")
        for other in self.units:
            if other.state == "fwd":
                self._post_forward(other)
        self.step.pre_forward(unit.index)
        unit.state = "fwd"
        if self.info["zero"] >= 3:
            # ZeRO-3 frees this copy at post_forward: each view is owned by a
            # lease that shows whether a tensor over it outlives the unit
            # (_check_released); what autograd saves of it is re-pointed at the
            # backward gather (_pack / _unpack). ZeRO-1/2 keep one copy all step,
            # so saved views stay valid.
            leases = [_Lease(self.step) for _ in unit.params]
            unit.leases = [weakref.ref(lease) for lease in leases]
            views = self._views(unit, leases)
            del leases
            for p, v in zip(unit.params, views):
                self.ptrs[v.untyped_storage().data_ptr()] = p
        else:
            views = self._views(unit)
        self._shadow(unit, self._through_autograd(unit, views))

    def _through_autograd(self, unit, views):
        if torch.is_grad_enabled() and any(p.requires_grad for p in unit.params):
            dummy = torch.empty(0, requires_grad=True)
            return list(_UnitParams.apply(self, unit, dummy, *views))
        return views

    def _unit_post(self, unit, module, output):
        if _in_backward() or unit.state != "fwd" or not torch.is_grad_enabled():
            return
        tensors = [t for t in torch.utils._pytree.tree_leaves(output)
                   if isinstance(t, torch.Tensor) and t.requires_grad]
        if tensors:
            gen = self.generation
            register_multi_grad_hook(
                tensors, lambda grads, u=unit: (self._check_generation(gen), self._pre_backward(u)),
                mode="any")

    def _post_forward(self, unit):
        # Ties whose alias reads the weight later: a copy, before it is freed.
        for t in self.ties:
            if t.primary.unit is unit and t.copy is None:
                t.copy = self.step.param_view(t.primary.index).view(t.primary.shape).clone()
        late = [t for t in self.late if t.primary.unit is unit and id(t.module) in self.running]
        for t in late:
            t.copy = self.step.param_view(t.primary.index).view(t.primary.shape).clone()
        self.step.post_forward(unit.index)
        for k in [k for k, v in self.ptrs.items() if v.unit is unit]:
            del self.ptrs[k]
        self._unshadow(unit)
        unit.state = "fwd_done"
        # The enclosing modules still running read their parameters from the copies
        # until they end (_enclosing_post).
        # (In the forward's grad mode, not this hook's: a reentrant checkpoint runs the
        # enclosed unit that frees this one under no_grad.)
        for t in late:
            t.value = t.copy
            if self.grad_forward and t.primary.requires_grad:
                with torch.enable_grad():
                    t.value = _TieCopy.apply(self, t, torch.empty(0, requires_grad=True),
                                             t.copy)
            t.module.__dict__[t.attr] = t.value
        self._check_released(unit)

    def _enclosing_pre(self, module, args):
        if not _in_backward():
            self.running.add(id(module))

    def _enclosing_post(self, module, args, output):
        if _in_backward():
            return
        self.running.discard(id(module))
        for t in self.late:
            if t.module is module and t.value is not None:
                if module.__dict__.get(t.attr) is t.value:
                    del module.__dict__[t.attr]
                t.value = None

    def _alias_pre(self, tie, module):
        p = tie.primary
        if p.unit.shadows is not None:
            # The primary's unit is gathered: the alias reads the same tensor.
            module.__dict__[tie.attr] = p.unit.shadows[p.slot]
            return
        if tie.copy is None:
            raise Error(f"tied parameter {tie.name!r} is read before the unit holding "
                        f"{p.name!r} (unit {p.unit.index}) ran in this forward: a tied alias "
                        "must be used after its primary's unit (e.g. lm_head after "
                        "embed_tokens)")
        value = tie.copy
        if torch.is_grad_enabled() and p.requires_grad:
            value = _TieCopy.apply(self, tie, torch.empty(0, requires_grad=True), value)
        module.__dict__[tie.attr] = value

    def _alias_post(self, tie, module, output):
        module.__dict__.pop(tie.attr, None)

    def _tie_grad(self, tie, grad):
        unit = tie.primary.unit
        if unit.state not in ("fwd_done", "bwd"):
            # Its unit was reduced already: the gradient would be lost.
            raise Error(f"the gradient of {tie.name!r} (a read of {tie.primary.name!r} "
                        f"outside its unit, unit {unit.index}) arrived after that unit's "
                        f"backward ended ({unit.state}): a read outside the unit must come "
                        "after the unit in the forward, so that its gradient comes before")
        tie.grad = grad.clone() if tie.grad is None else tie.grad.add_(grad)

    # -------------------------------------------------------------- backward

    def _check_generation(self, generation):
        if generation != self.generation:
            raise Error("backward of an earlier forward: the model ran forward again since, "
                        "which ended that forward's units (run backward before the next "
                        "forward)")

    def _queue_end_of_backward(self):
        if not self.backward_queued:
            self.backward_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._end_backward)

    def _pre_backward(self, unit):
        if unit.state == "bwd":
            return
        if unit.state != "fwd_done":
            raise Error(f"unit {unit.index}: its backward started but it is {unit.state} "
                        "(expected after its forward); was the model run again between the "
                        "forward and this backward?")
        self._queue_end_of_backward()
        self.step.pre_backward(unit.index)
        unit.state = "bwd"
        unit.views = self._views(unit)

    def _recompute(self, unit):
        # Activation checkpointing: the unit's forward runs again in backward
        # (once: the unit's other modules find it gathered).
        if unit.recomputing:
            return
        if unit.state == "fwd_done":
            self._pre_backward(unit)  # reentrant checkpoint: no output hook fired
        if unit.state != "bwd":
            raise Error(f"unit {unit.index}: recomputed in backward while {unit.state}")
        self.step.pre_forward(unit.index)
        unit.views = self._views(unit)
        self._shadow(unit, self._through_autograd(unit, unit.views))
        unit.recomputing = True

    def _post_backward(self, unit, grads):
        if unit.state == "fwd_done":
            self._pre_backward(unit)
        if unit.state != "bwd":
            raise Error(f"unit {unit.index}: gradients arrived while it is {unit.state}")
        got = set()
        for p, g in zip(unit.params, grads):
            if g is not None:
                self.step.grad_view(p.index).view(p.shape).add_(g)
                got.add(p.index)
        for t in self.ties + self.late:
            if t.primary.unit is unit and t.grad is not None:
                self.step.grad_view(t.primary.index).view(t.primary.shape).add_(t.grad)
                got.add(t.primary.index)
                t.grad = None
            if t.primary.unit is unit:
                t.copy = None  # (what autograd saved of it is its own reference)
        # torch keeps a zero .grad through zero_grad(set_to_none=False): a
        # parameter with one is stepped, used or not.
        self.grad_kept.update(got)
        self._mark_grads(got)
        for p in unit.params:
            if p.index not in got and p.requires_grad and p.index not in self.grad_kept:
                self.step.mark_no_grad(p.index)
        self.step.post_backward(unit.index)
        self._unshadow(unit)
        unit.views = None
        unit.recomputing = False
        unit.state = "idle"

    def _mark_grads(self, indices):
        """Placeholders whose runtime gradient exists get a .grad that says so."""
        for i in indices:
            p = self.params[i]
            q = _source(p)
            if q.grad is None and q.requires_grad:
                q.grad = _RuntimeGrad.of(q, p.name if p.fused is None else p.fused.name)

    def zero_grad(self, set_to_none):
        """The runtime's gradients zeroed (model.zero_grad, optimizer.zero_grad);
        with set_to_none every .grad None: unused parameters are skipped again."""
        self.step.zero_grad()
        if set_to_none:
            self.grad_kept.clear()
            for p in self.params:
                _source(p).grad = None

    def _end_backward(self):
        # Units whose gradients never arrived (parameters unused this step) are
        # reduced too, in backward order, so every rank issues the same collectives.
        self.backward_queued = False
        for u in reversed(self.units):
            if u.state in ("fwd_done", "bwd"):
                self._post_backward(u, [None] * len(u.params))

    # -------------------------------------------------------------- saved tensors

    def _pack(self, t):
        if not isinstance(t, torch.Tensor) or t.device.type == "meta" or t.is_sparse:
            return t
        try:
            ptr = t.untyped_storage().data_ptr()
        except (RuntimeError, NotImplementedError):
            return t
        p = self.ptrs.get(ptr)
        if p is None:
            return t
        return _SavedParam(p.index, t)

    def _unpack(self, saved):
        if not isinstance(saved, _SavedParam):
            return saved
        p = self.params[saved.index]
        unit = p.unit
        if unit.encloses and unit.state == "fwd_done" and _in_backward():
            # No output of an enclosing unit comes before the blocks it encloses, so
            # no output hook starts its backward: its first saved tensor does, after
            # the enclosed units' backward (the order of the step).
            self._pre_backward(unit)
        if unit.state != "bwd" or unit.views is None:
            raise Error(f"a tensor autograd saved from parameter {p.name!r} is read while unit "
                        f"{unit.index} is {unit.state}, not in its backward (pre_backward)")
        base = unit.views[p.slot]
        return base.as_strided(saved.size, saved.stride, base.storage_offset() + saved.offset)

    # -------------------------------------------------------------- names

    def _unit_name(self, unit):
        return ", ".join(p.name for p in unit.params[:3]) + (", ..." if len(unit.params) > 3 else "")

    def _module_name(self, module):
        for n, m in self.model.named_modules():
            if m is module:
                return n
        return type(module).__name__


# ------------------------------------------------------------------ checking a model

def _table_of(model):
    """The model's parameters by name (tied aliases listed once, under their
    first name) and the aliases."""
    first = {}
    names = []
    aliases = []
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            aliases.append((name, first[id(p)]))
        else:
            first[id(p)] = name
            names.append((name, p))
    return names, aliases


def _rows(names, table):
    """Each model parameter's rows in the plan: [(row name, index in the tensor or
    None for the whole)]; a fused tensor missing as a whole is looked for as its
    matrices (_split)."""
    rows = {}
    for name, p in names:
        if name in table:
            rows[name] = [(name, None)]
            continue
        pieces = _split(name, tuple(p.shape))
        if pieces and all(n in table for n, _ in pieces):
            rows[name] = pieces
    return rows


def check_model(model, library, external=()):
    """The differences between a model and a step library's plan (names, shapes,
    dtypes, ties), one line each; empty when the library fits the model."""
    names, aliases = _table_of(model)
    table = {e["name"]: e for e in library.params()}
    rows = _rows(names, table)
    problems = []
    covered = set()
    for name, p in names:
        if any(_glob(pat, name) for pat in external):
            continue
        if name not in rows:
            problems.append(f"parameter {name!r} {list(p.shape)}: not in the plan (a tied alias "
                            "in the model but not in the plan, or a parameter added after compile)")
            continue
        for row, where in rows[name]:
            covered.add(row)
            e = table[row]
            shape = tuple(p.shape) if where is None else tuple(_piece(p, where).shape)
            numel = math.prod(shape) if shape else 1
            lead = shape[0] if shape else 1
            if e["rows"] * e["cols"] != numel or e["rows"] != lead:
                what = f"shape {list(p.shape)}" if where is None else \
                    f"matrix {row!r} of shape {list(shape)}"
                problems.append(f"parameter {name!r}: {what} in the model, "
                                f"{e['rows']} x {e['cols']} in the plan")
            if (e["optimizer"] == _C.OPT_NONE) and p.requires_grad:
                problems.append(f"parameter {row!r}: trainable in the model, frozen in the plan")
                break
        if p.dtype != torch.float32:
            problems.append(f"parameter {name!r}: dtype {p.dtype} in the model; the runtime "
                            "keeps fp32 masters and hands fp32 views: train in fp32")
    for name in table:
        if name not in covered:
            tied = [a for a, prim in aliases if a == name]
            what = ("a tied alias in the model (the plan holds it as a parameter of its own)"
                    if tied else "missing from the model")
            problems.append(f"parameter {name!r} of the plan: {what}")
    return problems


# ------------------------------------------------------------------ the module

class MFSDPModule:
    """Mixed into a model by fully_shard (as FSDP2's FSDPModule): the methods a
    training loop needs from its sharded model."""

    @property
    def mfsdp_state(self):
        return self.__dict__["_mfsdp_state"]

    @property
    def device(self):
        """Where the model computes: the runtime's device (cpu on the host backend,
        the rank's GPU on the CUDA backend), as a model under FSDP2 reports it, so
        that `batch.to(model.device)` works. (transformers' `device` reads the first
        parameter's, which here is a placeholder on the meta device: the values
        live in the runtime.)"""
        return self.mfsdp_state.device

    def _apply(self, fn, recurse=True):
        """model.to / cuda / cpu / half / float / to_empty: the buffers (and any
        parameter the plan does not hold) are moved or cast as torch does; the
        parameters the runtime holds are placeholders, which stay as they are.
        So a move to the runtime's own device is allowed (HF's Trainer and many
        loops call model.to(device)), and a move elsewhere or a cast of the
        parameters, which the runtime cannot follow (its device and compute
        dtype are the plan's), raises instead of doing nothing silently."""
        state = self.mfsdp_state
        held = {id(q): q for q in map(_source, state.params)}
        for dtype in {q.dtype for q in held.values()}:
            probe = fn(torch.zeros(1, dtype=dtype))
            if probe.dtype != dtype:
                raise Error(f"this would cast the parameters from {dtype} to {probe.dtype}, "
                            "but the runtime holds them in the dtypes fully_shard planned "
                            "(choose the compute dtype with fully_shard's mixed precision "
                            "policy instead)")
            want, have = probe.device, state.device
            if want.type != have.type or (want.index is not None and have.index is not None
                                          and want.index != have.index):
                raise Error(f"this would move the model to {want}, but the runtime holds its "
                            f"parameters on {have} (model.device) and computes there: "
                            "fully_shard chose the device (its backend)")
        removed = []
        for mod in self.modules():
            for name, q in list(mod._parameters.items()):
                if q is not None and id(q) in held:
                    removed.append((mod, name, q))
                    mod._parameters[name] = None
        try:
            return super()._apply(fn, recurse)
        finally:
            for mod, name, q in removed:
                mod._parameters[name] = q

    @contextlib.contextmanager
    def no_sync(self):
        """Gradient accumulation: backwards inside keep their gradients locally;
        the first backward outside reduces the sum."""
        self.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.set_requires_gradient_sync(True)

    def set_requires_gradient_sync(self, requires_gradient_sync):
        try:
            self.mfsdp_state.step.set_no_sync(not requires_gradient_sync)
        except Error as e:
            raise Error(f"{e} (fully_shard(..., accumulate=True) compiles such a library)") \
                from None

    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        return clip_grad_norm_(self, max_norm, norm_type)

    def zero_grad(self, set_to_none=True):
        """The runtime's gradients zeroed, as optimizer.zero_grad() does (torch's
        Module.zero_grad would clear only the placeholders' .grad, and the next
        backward would add to the runtime's gradients)."""
        st = self.mfsdp_state
        st.zero_grad(set_to_none)
        for _, q in st.external:
            if q.grad is not None:
                if set_to_none:
                    q.grad = None
                else:
                    q.grad.zero_()

    # torch's own state dicts would hold the model's meta placeholders (the
    # values live in the runtime) and load nothing into them: refused,
    # naming what does the job.
    def state_dict(self, *args, **kwargs):
        raise Error("state_dict() of a fully_shard model would hold no values (its "
                    "parameters live in the runtime): use model.full_state_dict() "
                    "(every tensor whole, collective) or model.save_checkpoint(dir)")

    def load_state_dict(self, state_dict, *args, **kwargs):
        raise Error("load_state_dict() of a fully_shard model would load nothing (its "
                    "parameters live in the runtime): use "
                    "model.load_full_state_dict(state) or model.load_checkpoint(dir)")

    def full_state_dict(self):
        """Every parameter whole, on every rank (collective): {name: tensor}."""
        st = self.mfsdp_state
        out = {}
        fused = {}
        for p in st.params:
            buf = torch.empty(p.numel, dtype=torch.float32)
            st.step.store_param(p.index, buf)
            if p.fused is not None:
                fused.setdefault(id(p.fused), (p.fused, []))[1].append(buf.view(p.shape))
                continue
            out[p.name] = buf.view(p.shape)
            for (_, _, alias) in p.aliases:
                out[alias] = out[p.name]
        for f, pieces in fused.values():
            out[f.name] = f.assemble(pieces)
        for t in st.ties:
            out[t.name] = out[t.primary.name]
        for name, q in st.external:
            out[name] = q.detach().clone()
        return out

    def _external_not_in(self, what, external_saved):
        st = self.mfsdp_state
        if st.external and not external_saved:
            raise Error(f"{what}: the checkpoint holds what the runtime keeps, not the "
                        "parameters left to the outer stack (" +
                        ", ".join(n for n, _ in st.external) +
                        ") nor their optimizer state: save and load those with the outer "
                        "stack, and pass external_saved=True to say so")

    def save_checkpoint(self, directory, user=None, external_saved=False):
        """A sharded checkpoint on disk (collective: every rank calls it): each rank
        writes what it keeps (parameters, optimizer state) into `directory`, which
        must not exist, with the step count and `user` (a JSON-serialisable dict,
        e.g. the data position); atomic (docs/runtime.md, "Checkpoints on disk").
        A model with parameters left to an outer stack (external=) needs
        external_saved=True: those are the outer stack's to save."""
        self._external_not_in("save_checkpoint", external_saved)
        text = "" if user is None else json.dumps(user)
        self.mfsdp_state.step.save(os.fspath(directory), text)

    def load_checkpoint(self, directory, external_saved=False):
        """Loads a checkpoint saved by any mesh, policy or ZeRO level (collective):
        parameters, optimizer state and step count. Returns its user dict (or None).
        With external= parameters, external_saved=True as for save_checkpoint."""
        self._external_not_in("load_checkpoint", external_saved)
        text = self.mfsdp_state.step.load(os.fspath(directory))
        return json.loads(text) if text else None

    def export_hf(self, directory, dtype=None, max_shard_size="5GB"):
        """Writes the model as Hugging Face weights (collective: every rank gathers,
        rank 0 writes): model.safetensors, or shards with model.safetensors.index.json
        above max_shard_size, and config.json, in HF names, so that transformers'
        from_pretrained loads it. dtype: the tensors' dtype (default: the fp32
        masters). Written under a temporary name and renamed."""
        if not hasattr(self, "save_pretrained"):
            raise Error("export_hf: the model is not a transformers PreTrainedModel")
        directory = os.fspath(directory)
        state = self.full_state_dict()
        rank, _ = _rt.ranks()
        failure = None
        if rank == 0:
            try:
                if os.path.exists(directory):
                    raise Error(f"export_hf: {directory!r} exists; expected a new directory")
                tmp = directory + ".tmp-export"
                shutil.rmtree(tmp, ignore_errors=True)
                if dtype is not None:
                    state = {k: v.to(dtype) for k, v in state.items()}
                self.save_pretrained(tmp, state_dict=state, safe_serialization=True,
                                     max_shard_size=max_shard_size)
                os.replace(tmp, directory)
            except Exception as e:  # noqa: BLE001  (raised after the others are released)
                failure = e
        # Every rank leaves once rank 0 has written (a collective: a gather of
        # the first parameter); rank 0 then raises what failed, if anything.
        self.mfsdp_state.step.store_param(0, torch.empty(self.mfsdp_state.params[0].numel))
        if failure is not None:
            raise failure

    def load_hf(self, directory):
        """Starts from Hugging Face safetensors weights (collective): `directory` as
        save_pretrained writes it (model.safetensors or its shards); each rank reads
        only the rows it keeps (mfsdp_load_hf), F32, BF16 or F16 into the fp32
        masters; optimizer state and step count start at zero. Fused expert tensors
        (transformers 5's gate_up_proj and down_proj) are read into the matrices the
        plan holds them as."""
        self.mfsdp_state.step.load_hf(os.fspath(directory))

    def load_full_state_dict(self, state):
        """Loads whole parameters (every rank passes the same), those left to an
        outer stack (external=) included, as full_state_dict gives them."""
        st = self.mfsdp_state
        missing = sorted(({p.name if p.fused is None else p.fused.name for p in st.params} |
                          {name for name, _ in st.external}) - set(state))
        if missing:
            raise Error("load_full_state_dict: missing " + ", ".join(missing))
        for p in st.params:
            t = state[p.name if p.fused is None else p.fused.name].detach()
            if p.fused is not None:
                t = _piece(t, p.where)
            t = t.to(torch.float32).contiguous().reshape(-1)
            if t.numel() != p.numel:
                raise Error(f"load_full_state_dict: {p.name!r} has {t.numel()} elements, "
                            f"expected {p.numel}")
            st.step.load_param(p.index, t)
        for name, q in st.external:
            t = state[name].detach()
            if tuple(t.shape) != tuple(q.shape):
                raise Error(f"load_full_state_dict: {name!r} has shape {tuple(t.shape)}, "
                            f"expected {tuple(q.shape)}")
            with torch.no_grad():
                q.copy_(t)


def clip_grad_norm_(model, max_norm, norm_type=2.0):
    """torch.nn.utils.clip_grad_norm_ over every shard and owner (collective):
    returns the total 2-norm of the reduced gradients and scales them by
    min(1, max_norm / (total + 1e-6))."""
    if norm_type != 2.0:
        raise Error("clip_grad_norm_: only the 2-norm is supported")
    st = model.mfsdp_state if isinstance(model, MFSDPModule) else model
    extra = 0.0
    ext_grads = [q.grad for _, q in st.external if q.grad is not None]
    for g in ext_grads:
        extra += float(g.detach().double().pow(2).sum())
    total = st.step.clip_grad_norm(float(max_norm), extra)
    if ext_grads and max_norm > 0 and math.isfinite(max_norm) and math.isfinite(total):
        coef = min(1.0, max_norm / (total + 1e-6))
        for g in ext_grads:
            g.mul_(coef)
    return torch.tensor(total)


# ------------------------------------------------------------------ the optimizer

class MFSDPOptimizer(torch.optim.Optimizer):
    """The optimizer the runtime runs, seen through torch.optim's interface:
    param_groups (one per optimizer and per user group) whose hyperparameters are
    read at every step(), so LR schedulers and per-group weight decay work."""

    def __init__(self, state, groups):
        self._mfsdp = state
        self._table_index = {id(p.param): p.index for p in state.params}
        super().__init__(groups, {})
        self._external_opt = None
        ext = [g for g in self.param_groups if g["optimizer"] == "external"]
        if ext:
            self._external_opt = torch.optim.AdamW(
                [{"params": g["params"], **{k: g[k] for k in ("lr", "betas", "eps", "weight_decay")}}
                 for g in ext])

    def _push(self):
        st = self._mfsdp
        for g in self.param_groups:
            kind = g["optimizer"]
            if kind == "external":
                continue
            h = _hparams(kind, g)
            for q in g["params"]:
                st.step.set_hparams(self._table_index[id(q)], h)
        if self._external_opt is not None:
            ext = [g for g in self.param_groups if g["optimizer"] == "external"]
            for eg, g in zip(self._external_opt.param_groups, ext):
                for k in ("lr", "betas", "eps", "weight_decay"):
                    eg[k] = g[k]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        st = self._mfsdp
        if any(u.state != "idle" for u in st.units):
            busy = [f"{u.index} ({u.state})" for u in st.units if u.state != "idle"]
            raise Error("optimizer.step() while units are not through their backward: " +
                        ", ".join(busy))
        self._push()
        st.step.optimizer_step()
        if self._external_opt is not None:
            self._external_opt.step()
        return loss

    # torch.optim's state dict would hold no state (the runtime keeps it):
    # refused, as the model's are.
    def state_dict(self):
        raise Error("optimizer.state_dict() would hold no optimizer state (the runtime "
                    "keeps it): model.save_checkpoint(dir) saves it with the parameters "
                    "and the step count")

    def load_state_dict(self, state_dict):
        raise Error("optimizer.load_state_dict() would load no optimizer state (the "
                    "runtime keeps it): use model.load_checkpoint(dir)")

    def zero_grad(self, set_to_none=True):
        self._mfsdp.zero_grad(set_to_none)
        if self._external_opt is not None:
            self._external_opt.zero_grad(set_to_none)


def _hparams(kind, g):
    if kind == "adamw":
        b1, b2 = g["betas"]
        return {"lr": g["lr"], "weight_decay": g["weight_decay"], "beta1": b1, "beta2": b2,
                "eps": g["eps"]}
    if kind == "sgd":
        return {"lr": g["lr"], "weight_decay": g["weight_decay"], "momentum": g["momentum"],
                "nesterov": bool(g["nesterov"])}
    if kind == "muon":
        fn = g["adjust_lr_fn"]
        if fn not in _ADJUST_LR:
            raise Error(f"muon: adjust_lr_fn {fn!r} is not supported (None, 'original', "
                        "'match_rms_adamw' or 'spectral_unclamped')")
        a, b, c = g["ns_coefficients"]
        precision = g.get("ns_precision", "fp32")
        if precision not in _NS_PRECISION:
            raise Error(f"muon: ns_precision {precision!r} is not supported ('fp32' or 'bf16')")
        return {"lr": g["lr"], "weight_decay": g["weight_decay"], "momentum": g["momentum"],
                "nesterov": bool(g["nesterov"]), "ns_steps": int(g["ns_steps"]), "ns_a": a,
                "ns_b": b, "ns_c": c, "ns_eps": g["eps"], "ns_norm": _C.NS_NORM_CLAMP,
                "adjust_lr": _ADJUST_LR[fn], "ns_precision": _NS_PRECISION[precision]}
    raise Error(f"unknown optimizer {kind!r}")


def _groups(state, options, param_groups, library_defaults=None):
    """param_groups: one per optimizer the plan uses (hyperparameters: torch's
    defaults, then the library's own (library_defaults[kind]), updated by
    options[kind]), split by the user's groups."""
    kinds = {}
    for p in state.params:
        if p.optimizer != _C.OPT_NONE:
            kinds.setdefault(_OPT_NAMES[p.optimizer], []).append(p)
    base = {}
    # Every optimizer's options are checked, whether the plan uses it or not.
    for kind in set(kinds) | {k for k, v in options.items() if v}:
        h = dict(TORCH_DEFAULTS[kind], **MFSDP_OPTIONS.get(kind, {}))
        h.update((library_defaults or {}).get(kind, {}))
        for k, v in (options.get(kind) or {}).items():
            if k not in h:
                raise Error(f"{kind}: unknown option {k!r} (options: {', '.join(h)})")
            h[k] = v
        _hparams(kind, h)
        base[kind] = h
    taken = set()
    groups = []
    for i, ug in enumerate(param_groups or []):
        if "params" not in ug:
            raise Error(f"param_groups[{i}]: expected a dict with 'params' (names, patterns or "
                        "parameters) and the hyperparameters to override")
        sel = ug["params"]
        sel = [sel] if isinstance(sel, (str, nn.Parameter)) else list(sel)
        chosen = []
        for p in state.params:
            if p.index in taken or p.optimizer == _C.OPT_NONE:
                continue
            # A matrix of a fused tensor answers to its own name, the fused
            # tensor's name and the model's fused parameter itself.
            names = [p.name] + [a for (_, _, a) in p.aliases]
            tensors = [p.param]
            if p.fused is not None:
                names.append(p.fused.name)
                tensors.append(p.fused.param)
            if any((isinstance(s, str) and any(_glob(s, n) for n in names)) or
                   (isinstance(s, torch.Tensor) and any(s is t for t in tensors))
                   for s in sel):
                chosen.append(p)
        if not chosen:
            raise Error(f"param_groups[{i}]: selects no trainable parameter ({sel!r})")
        over = {k: v for k, v in ug.items() if k != "params"}
        by_kind = {}
        for p in chosen:
            by_kind.setdefault(_OPT_NAMES[p.optimizer], []).append(p)
            taken.add(p.index)
        for kind, ps in by_kind.items():
            h = dict(base[kind])
            for k, v in over.items():
                if k not in h:
                    raise Error(f"param_groups[{i}]: {k!r} is not an option of {kind} "
                                f"(parameters {', '.join(p.name for p in ps[:3])}...)")
                h[k] = v
            groups.append({"params": [p.param for p in ps], "optimizer": kind, **h})
    for kind, ps in kinds.items():
        rest = [p for p in ps if p.index not in taken]
        if rest:
            groups.insert(0 if kind == "muon" else len(groups),
                          {"params": [p.param for p in rest], "optimizer": kind, **base[kind]})
    if state.external:
        h = dict(TORCH_DEFAULTS["adamw"])
        h.update(options.get("adamw") or {})
        groups.append({"params": [q for _, q in state.external], "optimizer": "external", **h})
    return groups


# ------------------------------------------------------------------ fully_shard

def _default_units(model):
    classes = getattr(model, "_no_split_modules", None)
    if classes:
        names = set(classes)
        hits = [type(m) for m in model.modules() if type(m).__name__ in names]
        if hits:
            return list(dict.fromkeys(hits))
    raise Error("units: cannot tell which submodules are the units (each transformer block, "
                "as FSDP2 wraps them); pass units=['model.layers.*'] or units=[BlockClass]")


def _default_inputs(model):
    cfg = getattr(model, "config", None)
    vocab = getattr(cfg, "vocab_size", None)
    if vocab:
        return (torch.zeros(1, 8, dtype=torch.long),)
    raise Error("example_inputs: needed to export the model (one forward's inputs; only their "
                "shapes matter, on the meta device)")


class MixedPrecisionPolicy:
    """FSDP2's MixedPrecisionPolicy for fully_shard(mp_policy=...): param_dtype, the
    compute copies' dtype (None or torch.float32: fp32; torch.bfloat16), and
    reduce_dtype, the gradient reductions' (None: param_dtype, as FSDP2). FSDP2's
    output_dtype and cast_forward_inputs have no counterpart here."""

    def __init__(self, param_dtype=None, reduce_dtype=None):
        self.param_dtype = param_dtype
        self.reduce_dtype = reduce_dtype

    def __repr__(self):
        return (f"MixedPrecisionPolicy(param_dtype={self.param_dtype}, "
                f"reduce_dtype={self.reduce_dtype})")


def fully_shard(model, mesh="dp_shard=2", policy="adamw", zero=3, *, library=None,
                units=None, example_inputs=None, example_kwargs=None, external=(),
                prefetch=False, accumulate=False, bucket_mb=None, layouts=None,
                backend="host", adamw=None, muon=None, sgd=None, param_groups=None,
                init_fn=None, work_dir=None, compile_args=(), param_dtype=None,
                reduce_dtype=None, mp_policy=None, collective_timeout_s=None):
    """Shards `model` with a step library and returns (model, optimizer).

    mesh, policy, zero: the plan (mfsdp-compile --mesh --policy --zero); the model is
        exported (units: submodule names, patterns or classes; default: the model's
        `_no_split_modules`, each transformer block) and compiled on every rank.
    library: a step library compiled ahead of time instead; the model is checked
        against its plan (names, shapes, dtypes, ties) and every difference listed.
    prefetch, accumulate, bucket_mb, layouts: mfsdp-compile's options (accumulate=True
        is needed for no_sync()).
    adamw, muon, sgd: hyperparameters of each optimizer (torch.optim's names and
        defaults); param_groups: [{'params': names/patterns/parameters, **overrides}],
        e.g. [{'params': ['*norm*', '*.bias'], 'weight_decay': 0.0}].
    init_fn: for a model on the meta device: called as init_fn(module) on each module
        of each unit, unit by unit, on the gathered copy (default: the module's own
        reset_parameters()); each rank initialises only one unit at a time.
    external: names or patterns of parameters the plan leaves to an outer stack; they
        stay ordinary torch parameters, stepped by torch.optim.AdamW.
    param_dtype: torch.bfloat16 for bf16 mixed precision (FSDP2's
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)):
        the model's parameters become bf16 tensors over the runtime's bf16 gathered
        copies (gathered as bf16), gradients are bf16 and reduced in fp32, masters and
        optimizer state stay fp32. Default (None): fp32. Compiling only: a library
        compiled ahead of time carries its own dtypes.
    reduce_dtype: torch.bfloat16 to reduce gradients in bf16 (FSDP2's
        MixedPrecisionPolicy.reduce_dtype; mfsdp-compile --reduce-dtype=bf16): every
        reduce-scatter and all-reduce of gradients sends 2 bytes an element, each
        partial sum rounded to bf16, and the reduced gradient is widened to fp32 before
        the average (masters and optimizer state stay fp32). Default (None): fp32,
        whatever param_dtype. A library compiled ahead of time carries its own; giving
        another is an error.
    mp_policy: a MixedPrecisionPolicy instead of param_dtype and reduce_dtype, with
        FSDP2's defaults (its reduce_dtype None is its param_dtype).
    collective_timeout_s: the watchdog: a collective that does not complete within
        this many seconds (a rank stopped, dead or elsewhere) raises mfsdp.Error naming
        it and the ranks that did not arrive; the model is unusable then, end the job.
        Default (None): 10 minutes, as torch.distributed's NCCL process groups.
    """
    if isinstance(model, MFSDPModule):
        raise Error("fully_shard: this model is already sharded")
    if not isinstance(model, nn.Module):
        raise Error(f"fully_shard: expected a torch.nn.Module, got {type(model).__name__}")
    launch = _rt.launcher()
    if mp_policy is not None:
        if not isinstance(mp_policy, MixedPrecisionPolicy):
            raise Error(f"fully_shard: mp_policy is a {type(mp_policy).__name__}; expected "
                        "a mfsdp.torch.MixedPrecisionPolicy")
        if param_dtype is not None or reduce_dtype is not None:
            raise Error("fully_shard: give mp_policy, or param_dtype and reduce_dtype, "
                        "not both")
        param_dtype = mp_policy.param_dtype
        reduce_dtype = mp_policy.reduce_dtype or mp_policy.param_dtype
    if param_dtype not in (None, torch.float32, torch.bfloat16):
        raise Error(f"fully_shard: param_dtype {param_dtype}; expected torch.float32 or "
                    "torch.bfloat16")
    if reduce_dtype not in (None, torch.float32, torch.bfloat16):
        raise Error(f"fully_shard: reduce_dtype {reduce_dtype}; expected torch.float32 or "
                    "torch.bfloat16")
    reduce_name = "bf16" if reduce_dtype == torch.bfloat16 else "f32"
    if reduce_dtype == torch.bfloat16 and library is None:
        compile_args = list(compile_args) + ["--reduce-dtype=bf16"]
    # Muon's Newton-Schulz precision is the plan's (#plan.muon ns_precision):
    # compiled in, priced by the schedule, the library's default.
    ns_precision = muon.get("ns_precision") if isinstance(muon, dict) else None
    if ns_precision is not None and ns_precision not in _NS_PRECISION:
        raise Error(f"muon: ns_precision {ns_precision!r} is not supported ('fp32' or 'bf16')")
    if ns_precision is not None and library is None:
        compile_args = list(compile_args) + [f"--ns-precision={ns_precision}"]
    if library is None:
        lib_path = _compile(model, mesh, policy, zero, units, example_inputs, example_kwargs,
                            external, prefetch, accumulate, bucket_mb, layouts, work_dir,
                            compile_args, param_dtype)
    else:
        lib_path = os.fspath(library)
    lib = _rt.Library(lib_path)
    info = lib.info()
    if reduce_dtype is not None and info["reduce_dtype"] != reduce_name:
        raise Error(f"fully_shard: reduce_dtype {reduce_dtype}, but {lib_path} reduces in "
                    f"{info['reduce_dtype']} (mfsdp-compile --reduce-dtype)")
    lib_ns = info["muon"]["ns_precision"]
    runs_muon = any(e["optimizer"] == _C.OPT_MUON for e in lib.params())
    if ns_precision is not None and ns_precision != lib_ns and runs_muon:
        raise Error(f"fully_shard: muon ns_precision {ns_precision!r}, but {lib_path} runs "
                    f"Newton-Schulz in {lib_ns} (mfsdp-compile --ns-precision)")
    problems = check_model(model, lib, external)
    if problems:
        raise Error(f"the model does not match the plan of {lib_path}:\n  " +
                    "\n  ".join(problems))
    step = _rt.open_step(lib, backend=backend, launch=launch,
                         collective_timeout_s=collective_timeout_s)
    # torch.optim's rule: a parameter whose .grad is None (no rank's backward
    # reached it) is not stepped, not decayed, its state left alone.
    step.set_unused_grads(True)
    state = _install(model, step, lib, external)
    state.device = (torch.device("cpu") if _rt._BACKENDS.get(backend) == _C.BACKEND_HOST
                    else torch.device("cuda", torch.cuda.current_device()))
    _load_values(state, init_fn)
    cls = model.__class__
    model.__class__ = type(f"MFSDP{cls.__name__}", (MFSDPModule, cls), {})
    model.__dict__["_mfsdp_state"] = state
    groups = _groups(state, {"adamw": adamw, "muon": muon, "sgd": sgd}, param_groups,
                     {"muon": {"ns_precision": lib_ns}})
    optimizer = MFSDPOptimizer(state, groups)
    return model, optimizer


def _compile(model, mesh, policy, zero, units, example_inputs, example_kwargs, external,
             prefetch, accumulate, bucket_mb, layouts, work_dir, compile_args,
             param_dtype=None):
    from . import mfsdp_export
    if units is None:
        units = _default_units(model)
    if example_inputs is None and example_kwargs is None:
        example_inputs = _default_inputs(model)
    owned = {pat: "ext" for pat in external} if external else None
    if owned:
        raise Error("external=: compiling with parameters left to an outer stack needs a mesh "
                    "with its dims; compile ahead of time and pass library=")
    def export(device):
        return mfsdp_export.export_graph(model, units, example_inputs, name=type(model).__name__,
                                         example_kwargs=example_kwargs, mesh=mesh, device=device,
                                         dtype="bf16" if param_dtype == torch.bfloat16 else None)
    try:
        graph = export("meta")
    except mfsdp_export.ExportError as e:
        # Code that reads values (MoE routing, checkpointing's bookkeeping) cannot
        # run on the meta device: a live model is measured where it is.
        if any(p.device.type == "meta" for p in model.parameters()):
            raise Error(f"exporting the model failed: {e}") from None
        try:
            graph = export(None)
        except mfsdp_export.ExportError as e2:
            raise Error(f"exporting the model failed: {e2}") from None
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0"))
    if work_dir:
        d = work_dir
        os.makedirs(d, exist_ok=True)
    else:
        # The library is loaded before the process ends: its directory can go then.
        d = tempfile.mkdtemp(prefix=f"mfsdp-{rank}-")
        atexit.register(shutil.rmtree, d, True)
    gpath = os.path.join(d, f"model.{rank}.json")
    with open(gpath, "w") as f:
        f.write(mfsdp_export.dumps(graph))
    lpath = os.path.join(d, f"libstep.{rank}.so")
    _rt.compile_graph(gpath, lpath, mesh=mesh, policy=policy, zero=zero, prefetch=prefetch,
                      accumulate=accumulate, bucket_mb=bucket_mb, layouts=layouts,
                      extra_args=compile_args)
    return lpath


def _install(model, step, lib, external):
    state = _State(model, step, lib)
    modules = dict(model.named_modules(remove_duplicate=False))
    names, aliases = _table_of(model)
    table = {e["name"]: e for e in lib.params()}
    rows = _rows(names, table)
    for name, q in names:
        if name not in rows:
            state.external.append((name, q))
            continue
        mname, _, attr = name.rpartition(".")
        fused = None
        if rows[name][0][1] is not None:
            fused = _Fused(name, modules[mname], attr, q)
        for row, where in rows[name]:
            e = table[row]
            unit = state.units[e["unit"]]
            if fused is None:
                p = _Param(e["index"], row, modules[mname], attr, q, unit, e["optimizer"])
            else:
                # Each matrix has a parameter of its own for the optimizer's groups.
                piece = nn.Parameter(torch.empty(_piece(q, where).shape, device="meta"),
                                     requires_grad=q.requires_grad)
                p = _Param(e["index"], row, modules[mname], None, piece, unit, e["optimizer"])
                p.fused, p.where = fused, where
                fused.pieces.append(p)
                if fused not in unit.fused:
                    unit.fused.append(fused)
            state.params.append(p)
            unit.params.append(p)
            if p.module not in unit.modules:
                unit.modules.append(p.module)
    for f in {id(p.fused): p.fused for p in state.params if p.fused is not None}.values():
        if len({p.unit.index for p in f.pieces}) != 1:
            raise Error(f"parameter {f.name!r}: its matrices are planned in different units")
    state.params.sort(key=lambda p: p.index)
    if [p.index for p in state.params] != list(range(len(table))):
        raise Error("the model does not cover the plan's parameter table")
    index = {p.name: p for p in state.params}
    for alias, primary in aliases:
        mname, _, attr = alias.rpartition(".")
        prim = index.get(primary)
        if prim is None:
            continue  # an external or fused parameter's alias stays as it is
        mod = modules[mname]
        if any(mod is m for m in prim.unit.modules):
            prim.aliases.append((mod, attr, alias))
        else:
            state.ties.append(_Tie(prim, mod, attr, alias))
    # Hooks: the root brackets a forward; each unit's modules gather it.
    state.handles.append(model.register_forward_pre_hook(state._root_pre, with_kwargs=True))
    state.handles.append(model.register_forward_hook(state._root_post, always_call=True))
    names = {id(m): n for n, m in model.named_modules()}
    owner = {id(m): u for u in state.units for m in u.modules}
    for unit in state.units:
        for m in unit.modules:
            state.handles.append(m.register_forward_pre_hook(
                lambda mod, args, u=unit: state._unit_pre(u, mod)))
        # pre_backward fires from the unit's outputs: those of the smallest module
        # holding all of the unit's (a transformer block) when it holds no other
        # unit's, else of each of its modules.
        outer = _common_prefix([names[id(m)] for m in unit.modules])
        inside = [m for n, m in model.named_modules()
                  if outer and (n == outer or n.startswith(outer + "."))]
        if outer and all(owner.get(id(m), unit) is unit for m in inside):
            hooked = [modules[outer]]
        else:
            hooked = unit.modules
        for m in hooked:
            state.handles.append(m.register_forward_hook(
                lambda mod, args, out, u=unit: state._unit_post(u, mod, out)))
    for tie in state.ties:
        state.handles.append(tie.module.register_forward_pre_hook(
            lambda mod, args, t=tie: state._alias_pre(t, mod)))
        state.handles.append(tie.module.register_forward_hook(
            lambda mod, args, out, t=tie: state._alias_post(t, mod, out)))
    # A module that holds parameters of its own and encloses other units' modules
    # (the root of a model with a parameter of its own, as CLIP's logit_scale) runs
    # its unit's forward around theirs: its unit is freed when the first of them
    # starts, and what the module reads after is a copy (_post_forward).
    unit_at = {names[id(m)]: u for u in state.units for m in u.modules}
    enclosed = {}  # an enclosing module's name -> a module of another unit inside it
    for n, u in unit_at.items():
        parts = n.split(".") if n else []
        for k in range(len(parts)):
            v = unit_at.get(".".join(parts[:k]))
            if v is not None and v is not u:
                enclosed.setdefault(".".join(parts[:k]), n)
    for unit in state.units:
        for m in unit.modules:
            inner = enclosed.get(names[id(m)])
            if inner is None:
                continue
            unit.encloses = True
            for p in unit.params:
                if p.fused is not None and p.fused.module is m:
                    raise Error(f"parameter {p.fused.name!r}: a fused tensor of a module "
                                f"that encloses other units ({inner!r}) is not supported; "
                                "make that module a unit of its own")
                if p.module is m:
                    state.late.append(_Tie(p, m, p.attr, p.name))
                for (am, a, alias) in p.aliases:
                    if am is m:
                        state.late.append(_Tie(p, m, a, alias))
            state.handles.append(m.register_forward_pre_hook(state._enclosing_pre))
            state.handles.append(m.register_forward_hook(state._enclosing_post,
                                                         always_call=True))
    # Closed once the model is gone, where every rank is at the same point
    # (closing is collective; the garbage collector's timing is not).
    _rt.release_when_collected(model, step)
    return state


def _source(p):
    """The model's tensor a row of the plan comes from (a fused tensor's matrix)."""
    return p.param if p.fused is None else p.fused.param


def _common_prefix(names):
    """The longest module path that every name is inside ('' for the root)."""
    parts = [n.split(".") if n else [] for n in names]
    out = []
    for level in zip(*parts):
        if any(x != level[0] for x in level):
            break
        out.append(level[0])
    return ".".join(out)


def _load_values(state, init_fn):
    """The masters from the model's values; modules on the meta device are
    initialised unit by unit on the gathered copy."""
    meta = [p for p in state.params if _source(p).device.type == "meta"]
    if meta and len(meta) != len(state.params):
        raise Error("some parameters are on the meta device and some are not (" +
                    ", ".join(p.name for p in meta[:4]) + (", ..." if len(meta) > 4 else "") +
                    "): build the whole model under torch.device('meta') or none of it")
    if not meta:
        for p in state.params:
            t = _source(p).detach()
            if p.fused is not None:
                t = _piece(t, p.where)
            state.step.load_param(p.index, t.to(torch.float32).contiguous().reshape(-1))
    else:
        _init_on_gathered(state, init_fn)
    # The registered parameters keep their names and shapes, not their storage:
    # each is replaced by a parameter of its shape on the meta device (tied aliases
    # by the same one), so the model's own storage is released; the runtime holds
    # the values (full_state_dict() reads them back).
    replaced = {}
    for p in state.params:
        old = _source(p)
        if id(old) in replaced:
            continue
        new = nn.Parameter(torch.empty(old.shape, dtype=old.dtype, device="meta"),
                           requires_grad=old.requires_grad)
        replaced[id(old)] = (old, new)
        if p.fused is None:
            p.param = new
        else:
            p.fused.param = new
    for mod in state.model.modules():
        for k, v in list(mod._parameters.items()):
            if v is not None and id(v) in replaced and replaced[id(v)][0] is v:
                mod._parameters[k] = replaced[id(v)][1]


def _init_on_gathered(state, init_fn):
    uninit = []
    # Buffers are not sharded: each rank materialises them whole, first, so
    # that the init below writes into them: a unit's module's buffers (a
    # scaled embedding's scale, a norm's running statistics) are set by the
    # same call as its parameters, others (rotary frequencies) after.
    buffered = {}
    for m in state.model.modules():
        meta_bufs = [k for k, b in m._buffers.items() if b is not None and b.device.type == "meta"]
        if not meta_bufs:
            continue
        for k in meta_bufs:
            m._buffers[k] = torch.zeros_like(m._buffers[k], device="cpu")
        state.buffer_modules.append(m)
        buffered[m] = meta_bufs
    for unit in state.units:
        state.step.pre_forward(unit.index)
        views = state._views(unit)
        state._shadow(unit, views)
        try:
            with torch.no_grad():
                for m in unit.modules:
                    if init_fn is not None:
                        init_fn(m)
                    elif hasattr(m, "reset_parameters"):
                        m.reset_parameters()
                    else:
                        uninit += [p.name for p in unit.params if p.module is m]
                        uninit += [f"{type(m).__name__} buffer {k}" for k in buffered.get(m, ())]
            # Loads and stores use the runtime's staging buffer, which the unit's
            # gathered copy may share: copies first, loads once it is freed. A
            # fused tensor was initialised in its assembled copy.
            values = []
            for p, v in zip(unit.params, views):
                if p.fused is None:
                    values.append(v.clone())
                else:
                    values.append(_piece(p.fused.module.__dict__[p.fused.attr], p.where).clone())
        finally:
            state._unshadow(unit)
            state.step.post_forward(unit.index)
            state.step.end_forward(unit.index)
        for p, v in zip(unit.params, values):
            state.step.load_param(p.index, v.reshape(-1))
    # The modules outside every unit that hold buffers, initialised by the
    # same function.
    for m, meta_bufs in buffered.items():
        if any(m in u.modules for u in state.units):
            continue
        with torch.no_grad():
            if init_fn is not None:
                init_fn(m)
            elif hasattr(m, "reset_parameters"):
                m.reset_parameters()
            else:
                uninit += [f"{type(m).__name__} buffer {k}" for k in meta_bufs]
    if uninit:
        raise Error("parameters on the meta device that nothing initialised (their modules have "
                    "no reset_parameters; pass init_fn=, e.g. the model's own _init_weights): " +
                    ", ".join(uninit))
