#!/usr/bin/env python3
"""Bad use of mfsdp.torch gets an mfsdp.Error with a message that says what and where.

Run under mpirun -np 2: every case must raise mfsdp.Error (on every rank) whose
message holds the expected words; anything else (no error, another exception, a
crash, a hang) fails the test.
"""

import atexit
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("MFSDP_PYTHON_DIR",
                                  os.path.join(HERE, "..", "..", "build", "python")))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import mfsdp  # noqa: E402
import mfsdp.torch as mt  # noqa: E402
from mfsdp import runtime as rt  # noqa: E402

RANK, WORLD = rt.ranks()
failures = []


def llama(layers=2, hidden=32, tie=False):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=hidden, intermediate_size=48, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie))


def expect(what, fn, *words):
    try:
        fn()
    except mfsdp.Error as e:
        msg = str(e)
        missing = [w for w in words if w not in msg]
        if missing:
            failures.append(f"{what}: the message lacks {missing}:\n{msg}")
        elif RANK == 0:
            print(f"ok: {what}: {msg.splitlines()[0][:160]}", flush=True)
        return
    except Exception as e:  # noqa: BLE001
        failures.append(f"{what}: expected mfsdp.Error, got {type(e).__name__}: {e}")
        return
    failures.append(f"{what}: no error")


def check(what, fn, ok):
    """A case that returns what went wrong (None: nothing) rather than raising."""
    try:
        problem = fn()
    except Exception as e:  # noqa: BLE001
        failures.append(f"{what}: {type(e).__name__}: {e}")
        return
    if problem:
        failures.append(f"{what}: {problem}")
    elif RANK == 0:
        print(f"ok: {ok}", flush=True)


work = tempfile.mkdtemp(prefix=f"mfsdp-errors-{RANK}-")
atexit.register(shutil.rmtree, work, True)
ids = torch.randint(0, 64, (2, 8))

# A library compiled for one model, then used with models that differ.
base, _ = mt.fully_shard(llama(), mesh=f"dp_shard={WORLD}", work_dir=work)
lib = os.path.join(work, f"libstep.{os.environ.get('OMPI_COMM_WORLD_RANK', '0')}.so")


def changed(**kw):
    def run():
        mt.fully_shard(llama(**kw), library=lib)
    return run


expect("a model with another hidden size", changed(hidden=48), "does not match the plan",
       "model.embed_tokens.weight", "shape [64, 48] in the model, 64 x 32 in the plan")
expect("a model with a layer more", changed(layers=3), "model.layers.2.self_attn.q_proj.weight",
       "not in the plan")
expect("a model whose lm_head is tied (the plan has it untied)", changed(tie=True),
       "'lm_head.weight' of the plan", "tied alias")


def bf16_model():
    m = llama()
    m.model.norm.weight.data = m.model.norm.weight.data.bfloat16()
    mt.fully_shard(m, library=lib)


expect("a parameter of another dtype", bf16_model, "model.norm.weight", "dtype torch.bfloat16")

expect("a Muon Newton-Schulz precision that does not exist",
       lambda: mt.fully_shard(llama(), library=lib, muon={"ns_precision": "fp16"}),
       "muon: ns_precision 'fp16' is not supported ('fp32' or 'bf16')")


def ns_precision_of_a_muon_library():
    """Asked of a library given ahead of time that runs Muon in another
    precision: refused (an AdamW-only library, `lib`, has no Newton-Schulz to
    disagree with: its Muon options are checked and kept, as before)."""
    wd = os.path.join(work, "ns-fp32")
    os.makedirs(wd, exist_ok=True)
    mt.fully_shard(llama(), mesh=f"dp_shard={WORLD}", policy="mixed_muon_adamw", work_dir=wd)
    path = os.path.join(wd, f"libstep.{os.environ.get('OMPI_COMM_WORLD_RANK', '0')}.so")
    mt.fully_shard(llama(), library=path, muon={"ns_precision": "bf16"})


expect("a Newton-Schulz precision the library does not run", ns_precision_of_a_muon_library,
       "muon ns_precision 'bf16', but", "runs Newton-Schulz in fp32 (mfsdp-compile --ns-precision)")
check("Muon options for a library without Muon",
      lambda: None if mt.fully_shard(llama(), library=lib, muon={"ns_precision": "bf16"})
      else "fully_shard returned nothing",
      "an AdamW library takes Muon's ns_precision without a word")


def ns_precision_is_the_library_s():
    """Asked for, Newton-Schulz in bf16 is compiled into the library (its plan's
    muon_ns_precision) and is every Muon group's default, also for the same
    library given ahead of time without the option."""
    wd = os.path.join(work, "ns-bf16")
    os.makedirs(wd, exist_ok=True)
    _, opt = mt.fully_shard(llama(), mesh=f"dp_shard={WORLD}", policy="mixed_muon_adamw",
                            work_dir=wd, muon={"ns_precision": "bf16"})
    path = os.path.join(wd, f"libstep.{os.environ.get('OMPI_COMM_WORLD_RANK', '0')}.so")
    info = rt.Library(path).info()["muon"]["ns_precision"]
    if info != "bf16":
        return f"the library's muon ns_precision is {info!r}"
    _, again = mt.fully_shard(llama(), library=path)
    for o in (opt, again):
        got = {g["ns_precision"] for g in o.param_groups if g["optimizer"] == "muon"}
        if got != {"bf16"}:
            return f"the Muon groups' ns_precision is {got}"
    return None


check("Newton-Schulz precision compiled in", ns_precision_is_the_library_s,
      "a library compiled with ns_precision bf16 runs it by default")
expect("an option torch's Muon does not have",
       lambda: mt.fully_shard(llama(), library=lib, muon={"ns_form": "gemm"}),
       "muon: unknown option 'ns_form'", "ns_precision")
expect("a file that is not a step library",
       lambda: mt.fully_shard(llama(), library=rt.__file__), "cannot open the step library")
expect("a missing library", lambda: mt.fully_shard(llama(), library=os.path.join(work, "no.so")),
       "cannot open the step library")

# A plan for another world size: every rank refuses it, none hangs.
other = os.path.join(work, "other.json")


def other_world():
    from mfsdp import mfsdp_export
    m = llama()
    g = mfsdp_export.export_graph(m, mt._default_units(m), (ids,), name="llama")
    with open(other, "w") as f:
        f.write(mfsdp_export.dumps(g))
    path = os.path.join(work, "other.so")
    rt.compile_graph(other, path, mesh=f"dp_shard={WORLD * 2}", policy="adamw")
    mt.fully_shard(llama(), library=path)


expect("a library planned for another number of ranks", other_world,
       "creating the runtime", "built for a plan of 4 ranks" if WORLD == 2 else "ranks")

# Hooks out of order.
model, opt = base, None


def step_before_backward():
    m, o = mt.fully_shard(llama(), library=lib)
    m(input_ids=ids, labels=ids)
    o.step()


expect("optimizer.step() after a forward, before its backward", step_before_backward,
       "optimizer.step() while units are not through their backward")


def step_twice():
    m, o = mt.fully_shard(llama(), library=lib)
    m(input_ids=ids, labels=ids).loss.backward()
    o.step()
    o.zero_grad()
    o.step()  # no backward since the last step: refused, parameters unchanged


expect("optimizer.step() twice with no backward between", step_twice,
       "mfsdp_optimizer_step failed (order)", "no gradients were reduced since the last "
       "optimizer_step")


def hparams_refused():
    m, o = mt.fully_shard(llama(), library=lib, adamw={"betas": (1.0, 0.999)})
    m(input_ids=ids, labels=ids).loss.backward()
    o.step()


expect("a hyperparameter out of range (AdamW beta1 = 1)", hparams_refused,
       "mfsdp_set_hparams failed (invalid)", "beta1")


def runtime_order():
    m, _ = mt.fully_shard(llama(), library=lib)
    m.mfsdp_state.step.post_backward(0)


expect("post_backward without pre_backward (the runtime's own check)", runtime_order,
       "mfsdp_post_backward failed (order)", "post_backward of unit 0 without its pre_backward")


def lone_bad_tensor():
    # One rank's whole tensor has the wrong size: every rank fails the call
    # (before, that rank alone raised and the other waited in the gather).
    m, _ = mt.fully_shard(llama(), library=lib)
    n = m.mfsdp_state.params[0].numel
    m.mfsdp_state.step.store_param(0, torch.empty(n if RANK == 0 else n + 1))


expect("store_param with a tensor of the wrong size on rank 1 only", lone_bad_tensor,
       "mfsdp_store_param", *(["floats", "got"] if RANK == 1 else ["rank 1 failed storing"]))


def inputs_on_meta():
    # The FSDP idiom of moving inputs to the parameters' device: ours are meta.
    m, _ = mt.fully_shard(llama(), library=lib)
    m(input_ids=ids.to(next(m.parameters()).device))


expect("inputs moved to next(model.parameters()).device (meta)", inputs_on_meta,
       "argument 'input_ids' is on the meta device", "model.device")


def moved_elsewhere():
    m, _ = mt.fully_shard(llama(), library=lib)
    m.to("meta")


expect("model.to another device than the runtime's", moved_elsewhere,
       "would move the model to meta", "model.device")


def cast_parameters():
    m, _ = mt.fully_shard(llama(), library=lib)
    m.to(torch.float16)


expect("model.to(float16) (a cast of the parameters the runtime holds)", cast_parameters,
       "would cast the parameters from torch.float32 to torch.float16")


def no_sync_without_accumulate():
    m, _ = mt.fully_shard(llama(), library=lib)
    with m.no_sync():
        pass


expect("no_sync() on a library without --accumulate", no_sync_without_accumulate,
       "accumulate=True")


def backward_after_new_forward():
    m, _ = mt.fully_shard(llama(), library=lib)
    loss = m(input_ids=ids, labels=ids).loss
    m(input_ids=ids, labels=ids)  # a second forward: the first graph's units are gone
    loss.backward()


expect("backward of a forward that a later forward replaced", backward_after_new_forward,
       "backward of an earlier forward")


# ZeRO-3 reuses a freed unit's memory for the next units: a tensor over a
# parameter's gathered copy that outlives its unit's forward would read other
# weights later. Autograd's saved tensors are re-pointed; anything else that
# keeps one is refused when the unit is freed.
def kept_in_a_list():
    m, _ = mt.fully_shard(llama(), library=lib)
    kept = []
    m.model.layers[0].mlp.register_forward_hook(
        lambda mod, args, out: kept.append(mod.down_proj.weight.t()))
    m(input_ids=ids, labels=ids)


expect("a view of a ZeRO-3 parameter kept past its unit's forward", kept_in_a_list,
       "a tensor over the gathered copy of 'model.layers.0.mlp.down_proj.weight'",
       "still referenced after the unit was freed", ".detach().clone()")


class _LinearOnCtx(torch.autograd.Function):
    # Stores the weight on ctx (not ctx.save_for_backward): backward would read it.
    @staticmethod
    def forward(ctx, x, w):
        ctx.x, ctx.w = x, w
        return x @ w.t()

    @staticmethod
    def backward(ctx, g):
        return g @ ctx.w, g.transpose(-1, -2) @ ctx.x


def weight_on_ctx():
    m, _ = mt.fully_shard(llama(), library=lib)
    proj = m.model.layers[1].self_attn.o_proj
    proj.forward = lambda x: _LinearOnCtx.apply(x, proj.weight)
    m(input_ids=ids, labels=ids).loss.backward()


expect("a custom autograd Function that keeps a ZeRO-3 weight on ctx", weight_on_ctx,
       "'model.layers.1.self_attn.o_proj.weight'", "custom autograd Function")


class NoInit(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(8))
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x * self.scale)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([NoInit() for _ in range(2)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def meta_uninitialised():
    with torch.device("meta"):
        net = Net()
    mt.fully_shard(net, mesh=f"dp_shard={WORLD}", units=["blocks.*"],
                   example_inputs=(torch.zeros(2, 8),))


expect("a meta-device model with a parameter nothing initialises", meta_uninitialised,
       "nothing initialised", "blocks.0.scale")


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, gate):
        return self.fc(x) * gate


class PassesItsOwn(nn.Module):
    """A root with a parameter of its own that it hands to the enclosed blocks:
    under ZeRO-3 the tensor made from it before the first block starts would
    outlive its unit."""

    def __init__(self):
        super().__init__()
        self.gate = nn.Parameter(torch.ones(8))
        self.blocks = nn.ModuleList([Gated() for _ in range(2)])

    def forward(self, x):
        g = self.gate.view(1, 8)  # a view: it lies in the gathered copy
        for b in self.blocks:
            x = b(x, g)
        return x.sum()


def own_parameter_passed_in():
    m, _ = mt.fully_shard(PassesItsOwn(), mesh=f"dp_shard={WORLD}", units=["blocks.*"],
                          example_inputs=(torch.zeros(2, 8),),
                          work_dir=os.path.join(work, "passes-its-own"))
    m(torch.ones(2, 8)).backward()


def torch_clip_on_placeholders():
    # torch's own clip over the model's parameters: their gradients live in the
    # runtime; it must not clip nothing and report a norm of 0.
    m, o = mt.fully_shard(llama(), library=lib)
    m(input_ids=ids, labels=ids).loss.backward()
    p = m.model.embed_tokens.weight
    if p.grad is None or tuple(p.grad.shape) != tuple(p.shape):
        raise AssertionError(f"after backward, .grad is {p.grad!r}")
    o.step()
    o.zero_grad()
    if p.grad is not None:
        raise AssertionError("zero_grad() left a .grad")
    m(input_ids=ids, labels=ids).loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)


expect("torch.nn.utils.clip_grad_norm_ over the model's parameters",
       torch_clip_on_placeholders, ".grad: the gradient is held by the mfsdp runtime",
       "model.clip_grad_norm_(max_norm)")


expect("a root's own parameter passed to the units it encloses (ZeRO-3)",
       own_parameter_passed_in, "encloses other units", "'gate'", "zero=2")


# Models dropped while the ranks' garbage collectors run at different
# moments: closing a runtime is collective, so a close from rank 0's
# collector while rank 1 already creates the next runtime would leave the
# two waiting on each other. Closes wait for the next point every rank
# reaches together (the next fully_shard), in the order opened.
def dropped_models():
    import gc
    rt.close_unused()
    before = len(rt._open_steps)
    for _ in range(3):
        m, _ = mt.fully_shard(llama(), library=lib)
        m(input_ids=ids, labels=ids).loss.backward()
        del m
        if RANK == 0:
            gc.collect()
    kept, _ = mt.fully_shard(llama(), library=lib)
    kept(input_ids=ids, labels=ids).loss.backward()
    rt.close_unused()
    return len(rt._open_steps) - before


try:
    opened = dropped_models()
    if opened != 1:
        failures.append(f"dropped models: {opened} more runtimes open, expected the one kept")
    elif RANK == 0:
        print("ok: models dropped at different moments on each rank: their runtimes closed "
              "together, the kept one open", flush=True)
except Exception as e:  # noqa: BLE001
    failures.append(f"dropped models: {type(e).__name__}: {e}")

# A backward that raises part way (a hook's error, an out-of-memory caught by
# the trainer): the next forward ends its units, zero_grad clears what was
# reduced, and the next step equals a step of a model that never failed.
def backward_that_raises():
    m, o = mt.fully_shard(llama(), library=lib)
    ref, ro = mt.fully_shard(llama(), library=lib)
    boom = [True]

    def raise_once(grad):
        if boom[0]:
            boom[0] = False
            raise RuntimeError("boom in backward")
        return grad

    def arm(mod, args, out):
        if boom[0]:
            out.register_hook(raise_once)

    m.model.layers[0].mlp.register_forward_hook(arm)
    try:
        m(input_ids=ids, labels=ids).loss.backward()
        return "the backward did not raise"
    except RuntimeError as e:
        if "boom in backward" not in str(e):
            raise
    o.zero_grad()
    for model, opt in ((m, o), (ref, ro)):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        opt.zero_grad()
    got, want = m.full_state_dict(), ref.full_state_dict()
    differ = [n for n in want if not torch.equal(got[n], want[n])]
    return f"after the failed backward, {differ[:3]} differ from a clean run" if differ else None


def module_zero_grad():
    """torch's Module.zero_grad on the model (HF Trainer calls it) zeroes the
    runtime's gradients too: the next backward's norm is the first's, not twice."""
    m, o = mt.fully_shard(llama(), library=lib)
    m(input_ids=ids, labels=ids).loss.backward()
    first = float(m.clip_grad_norm_(1e9))
    m.zero_grad()
    if m.model.embed_tokens.weight.grad is not None:
        return "model.zero_grad() left a .grad"
    m(input_ids=ids, labels=ids).loss.backward()
    again = float(m.clip_grad_norm_(1e9))
    if abs(again - first) > 1e-6 * first:
        return f"after model.zero_grad() the gradient norm is {again}, the first {first}"
    return None


def to_own_device():
    # model.to(model.device) (HF's Trainer and many loops call it), also after a
    # backward (the .grad stand-ins) leaves everything in place: the next
    # step's loss equals a run without it.
    losses = []
    for move in (False, True):
        m, opt = mt.fully_shard(llama(), library=lib)
        for _ in range(2):
            loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            if move:
                m.to(m.device)
                m.float()
            opt.step()
            opt.zero_grad()
        losses.append(float(m(input_ids=ids, labels=ids).loss))
    if losses[0] != losses[1]:
        return f"the loss after model.to(model.device) is {losses[1]}, without {losses[0]}"
    return None


check("model.to(model.device)", to_own_device,
      "model.to(model.device) and model.float() leave the model as it is")
check("model.zero_grad()", module_zero_grad, "model.zero_grad() zeroes the runtime's gradients")
check("a backward that raised", backward_that_raises,
      "a backward that raised part way: the next step equals a clean run's")

for f in failures:
    print(f"rank {RANK}: FAIL: {f}", flush=True)
if RANK == 0 and not failures:
    print("every bad use raised mfsdp.Error with its message", flush=True)
sys.exit(1 if failures else 0)
