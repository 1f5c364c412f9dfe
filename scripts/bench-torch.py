#!/usr/bin/env python3
"""The PyTorch package against FSDP2: one model, two ranks, the same processes.

    mpirun -np 2 python3 scripts/bench-torch.py            (as root: mpirun
        --allow-run-as-root --oversubscribe -np 2 python3 scripts/bench-torch.py)

A transformers LlamaForCausalLM (random init, fp32, CPU, one compute thread per
rank) is trained on 2 ranks by
  - FSDP2: torch.distributed.fsdp.fully_shard on every decoder layer and the root
    (reshard after forward: ZeRO-3), gloo process group; torch.optim.Muon on the
    2-D hidden matrices and torch.optim.AdamW on the rest (the same split as the
    plan's), or AdamW on everything. torch.optim.Muon runs on FSDP2's DTensor
    shards as is (FSDP2); with --fsdp2-muon=both (the default) a second FSDP2 run
    (FSDP2-g) does Newton-Schulz on each matrix's full_tensor() instead;
  - mfsdp: mfsdp.torch.fully_shard(policy="mixed_muon_adamw" or "adamw", zero=3),
    host backend (MPI + OpenBLAS).
Both start from the same weights (one model, deep-copied before sharding) and see
the same batches. The runs are interleaved in rounds in the same two processes
(the gloo group's port: --port, else rank 0 picks a free one and hands it over in
a file under /tmp named after mpirun's job id). Per step: a barrier, forward + backward; a barrier, optimizer step +
zero_grad. Each region's time is the maximum over ranks; the figures are medians
over the measured steps. Then the package's Python overhead is measured on extra
mfsdp steps with its hook entry points and runtime calls timed (what is counted is
printed with the figures).

Newton-Schulz runs in fp32 on both sides: torch.optim.Muon's
_zeropower_via_newtonschulz (bf16) is replaced by the same iteration in fp32; the
host runtime runs it in fp32.

The last line is `ratio optimizer Ox step Sx`: FSDP2's median time over ours, Muon
case (torch.optim.Muon as is), for the optimizer step and the whole step.
"""

import argparse
import copy
import os
import socket
import statistics
import sys
import time

# One BLAS thread per rank for the runtime's OpenBLAS (read when the library
# loads), as torch.set_num_threads(1) is for torch: 2 ranks on 2 cores.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("MFSDP_PYTHON_DIR",
                                  os.path.join(HERE, "..", "build", "python")))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.optim._muon as torch_muon  # noqa: E402

import mfsdp.torch as mt  # noqa: E402
from mfsdp import _C  # noqa: E402
from mfsdp import runtime as mrt  # noqa: E402

pc = time.perf_counter

MUON = {"lr": 0.02, "momentum": 0.95, "nesterov": True, "weight_decay": 0.1,
        "adjust_lr_fn": "match_rms_adamw", "eps": 1e-7, "ns_steps": 5}
ADAMW = {"lr": 3e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
CASES = {"muon": "mixed_muon_adamw", "adamw": "adamw"}


# ------------------------------------------------------------------ launch

def world_from_env():
    env = os.environ
    if "OMPI_COMM_WORLD_RANK" in env:
        return int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"])
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"])
    raise SystemExit("bench-torch: start it with mpirun -np 2 or torchrun --nproc-per-node 2 "
                     "(no OMPI_COMM_WORLD_RANK, nor RANK and WORLD_SIZE)")


def agree_on_port(rank, fixed):
    """MASTER_PORT for the gloo group: --port, else a free port rank 0 picks and
    hands over in a file named after mpirun's job id."""
    if fixed:
        return fixed, None
    job = os.environ.get("OMPI_MCA_ess_base_jobid") or os.environ.get("PMIX_NAMESPACE")
    if not job:
        return 29517, None
    path = f"/tmp/mfsdp-bench-torch.{job}.port"
    if rank == 0:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        with open(path + ".tmp", "w") as f:
            f.write(str(port))
        os.replace(path + ".tmp", path)
        return port, path
    deadline = time.time() + 120
    while True:
        try:
            with open(path) as f:
                text = f.read().strip()
            if text:
                return int(text), None
        except FileNotFoundError:
            pass
        if time.time() > deadline:
            raise SystemExit(f"bench-torch: rank {rank}: no port from rank 0 in {path}")
        time.sleep(0.05)


# ------------------------------------------------------------------ model, data

def build_model(args):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                      intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                      num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                      max_position_embeddings=max(256, args.seq), tie_word_embeddings=False)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    model.train()
    return model


def batch(args, step, rank, world):
    """Step `step`'s global batch (each sequence counts up from a random start, a
    task the model learns), this rank's slice; the same on every framework."""
    gen = torch.Generator().manual_seed(1000 + step)
    start = torch.randint(0, args.vocab, (world, args.batch, 1), generator=gen)
    ids = (start + torch.arange(args.seq)) % args.vocab
    return ids[rank].contiguous()


ns_fp32 = mt.newton_schulz_fp32  # torch's Newton-Schulz, the iterate in fp32
NS_GATHER = [False]  # which form the FSDP2 run stepping now uses


def ns_fp32_dispatch(grad, ns_coefficients, ns_steps, eps):
    """Installed as torch.optim._muon._zeropower_via_newtonschulz."""
    if NS_GATHER[0]:
        return ns_fp32_gathered(grad, ns_coefficients, ns_steps, eps)
    return ns_fp32(grad, ns_coefficients, ns_steps, eps)


def ns_fp32_gathered(grad, ns_coefficients, ns_steps, eps):
    """What an FSDP2 user writes when Muon must see whole matrices: all-gather the
    (momentum) gradient, Newton-Schulz on the whole matrix on every rank, keep this
    rank's rows of the result."""
    from torch.distributed.tensor import DTensor, distribute_tensor
    if isinstance(grad, DTensor):
        full = ns_fp32(grad.full_tensor(), ns_coefficients, ns_steps, eps)
        return distribute_tensor(full, grad.device_mesh, grad.placements, src_data_rank=None)
    return ns_fp32(grad, ns_coefficients, ns_steps, eps)


# ------------------------------------------------------------------ the package's overhead

# Entry points of the package's Python, timed (outermost call only: a nested one,
# e.g. _pre_backward from _post_backward, is inside its caller's time).
HOOKS = ("_root_pre", "_root_post", "_unit_pre", "_unit_post", "_pre_backward",
         "_post_backward", "_end_backward", "_pack", "_unpack", "_alias_pre", "_alias_post",
         "_tie_grad", "_check_generation")
OPT_HOOKS = ("step", "zero_grad")


class Probe:
    def __init__(self):
        self.on = False
        self.depth = 0
        self.reset()

    def reset(self):
        self.hook = 0.0
        self.rt = 0.0
        self.hook_by = {}
        self.rt_by = {}
        self.calls = 0
        self.rt_calls = 0


def _timed(name, orig, probe_of):
    def wrapper(self, *a, **k):
        pr = probe_of(self)
        if pr is None or not pr.on or pr.depth:
            return orig(self, *a, **k)
        pr.depth = 1
        t0 = pc()
        try:
            return orig(self, *a, **k)
        finally:
            dt = pc() - t0
            pr.depth = 0
            pr.hook += dt
            pr.hook_by[name] = pr.hook_by.get(name, 0.0) + dt
            pr.calls += 1
    wrapper.__name__ = name
    return wrapper


def instrument_package():
    """Wraps the hook entry points (before fully_shard, which binds some of them)."""
    for name in HOOKS:
        setattr(mt._State, name, _timed(name, getattr(mt._State, name),
                                        lambda st: st.__dict__.get("_bench_probe")))
    for name in OPT_HOOKS:
        setattr(mt.MFSDPOptimizer, name,
                _timed("optimizer." + name, getattr(mt.MFSDPOptimizer, name),
                       lambda opt: opt._mfsdp.__dict__.get("_bench_probe")))


class TimedStep:
    """Stands for the runtime (mfsdp._C.Step) during the overhead steps: every
    call into it made inside a timed entry point is timed."""

    def __init__(self, real, probe):
        self.__dict__["_real"] = real
        self.__dict__["_probe"] = probe

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if not callable(attr):
            return attr
        pr = self._probe

        def call(*a, **k):
            if not pr.on or not pr.depth:
                return attr(*a, **k)
            t0 = pc()
            try:
                return attr(*a, **k)
            finally:
                dt = pc() - t0
                pr.rt += dt
                pr.rt_by[name] = pr.rt_by.get(name, 0.0) + dt
                pr.rt_calls += 1
        return call


# ------------------------------------------------------------------ the runs

class Run:
    def __init__(self, framework, case, model, optimizers, label):
        self.framework, self.case, self.model, self.optimizers = framework, case, model, optimizers
        self.label = label
        self.ns_gather = False
        self.steps_done = 0
        self.losses = []
        self.times = []       # (fwd+bwd, optimizer, step) of each measured step, this rank
        self.state = None
        self.probe = None
        self.overhead = []    # per instrumented step: dict

    def step(self, args, rank, world, record):
        ids = batch(args, self.steps_done, rank, world)
        dist.barrier()
        c0 = time.process_time()
        t0 = pc()
        out = self.model(input_ids=ids, labels=ids)
        out.loss.backward()
        t1 = pc()
        dist.barrier()
        NS_GATHER[0] = self.ns_gather
        t2 = pc()
        for o in self.optimizers:
            o.step()
        for o in self.optimizers:
            o.zero_grad()
        t3 = pc()
        cpu = time.process_time() - c0
        loss = out.loss.detach().clone()
        dist.all_reduce(loss)
        self.losses.append(float(loss) / world)
        self.steps_done += 1
        if record:
            self.times.append((t1 - t0, t3 - t2, t3 - t0, cpu))
        return (t1 - t0, t3 - t2, t3 - t0)


def fsdp2_run(ref, case, muon_names, args, world, gather=False):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    model = copy.deepcopy(ref)
    mesh = init_device_mesh("cpu", (world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    named = list(model.named_parameters())
    foreach = {"on": True, "off": False, "default": None}[args.fsdp2_foreach]
    if case == "muon":
        mu = [p for n, p in named if n in muon_names]
        rest = [p for n, p in named if n not in muon_names]
        opts = [torch.optim.Muon(mu, **MUON), torch.optim.AdamW(rest, **ADAMW, foreach=foreach)]
    else:
        opts = [torch.optim.AdamW([p for _, p in named], **ADAMW, foreach=foreach)]
    fw = "FSDP2-g" if gather else "FSDP2"
    run = Run(fw, case, model, opts, f"{fw} {case}")
    run.ns_gather = gather
    return run


def plan_library(model, policy, world, work_dir, rank, prefetch):
    """A step library whose plan carries the benchmark's hyperparameters (the
    graph's policy object): for a runtime that cannot take them at step time."""
    from mfsdp import mfsdp_export
    b1, b2 = ADAMW["betas"]
    pol = {"optimizer": policy, "zero": 3,
           "adamw": {"lr": ADAMW["lr"], "beta1": b1, "beta2": b2, "eps": ADAMW["eps"],
                     "weight_decay": ADAMW["weight_decay"]}}
    if "muon" in policy:  # the compiler refuses Muon settings for a policy without Muon
        pol["muon"] = {"lr": MUON["lr"], "momentum": MUON["momentum"],
                       "weight_decay": MUON["weight_decay"], "nesterov": MUON["nesterov"],
                       "ns_steps": MUON["ns_steps"], "scale": MUON["adjust_lr_fn"]}
    graph = mfsdp_export.export_graph(model, [type(model.model.layers[0])],
                                      (torch.zeros(1, 8, dtype=torch.long),),
                                      name=type(model).__name__, mesh=f"dp_shard={world}",
                                      policy=pol)
    os.makedirs(work_dir, exist_ok=True)
    gpath = os.path.join(work_dir, f"{policy}.{rank}.json")
    with open(gpath, "w") as f:
        f.write(mfsdp_export.dumps(graph))
    lpath = os.path.abspath(os.path.join(work_dir, f"libstep-{policy}.{rank}.so"))
    mrt.compile_graph(gpath, lpath, mesh=f"dp_shard={world}", policy=policy, zero=3,
                      prefetch=prefetch)
    return lpath


def mfsdp_run(ref, case, args, world, rank, hparams_mode, work_dir):
    model = copy.deepcopy(ref)
    kw = dict(mesh=f"dp_shard={world}", policy=CASES[case], zero=3, adamw=dict(ADAMW),
              muon=dict(MUON))
    if hparams_mode == "plan":
        kw["library"] = plan_library(model, CASES[case], world, work_dir, rank, args.prefetch)
    else:
        kw["prefetch"] = args.prefetch
    model, opt = mt.fully_shard(model, **kw)
    run = Run("mfsdp", case, model, [opt], f"mfsdp {case}")
    run.state = model.mfsdp_state
    run.probe = Probe()
    run.state.__dict__["_bench_probe"] = run.probe
    return run


def instrumented_step(run, args, rank, world):
    st, pr = run.state, run.probe
    real = st.step
    st.step = TimedStep(real, pr)
    pr.reset()
    pr.on = True
    try:
        fb, opt, whole = run.step(args, rank, world, record=False)
    finally:
        pr.on = False
        st.step = real
    run.overhead.append({"hook": pr.hook, "rt": pr.rt, "whole": whole, "fb": fb, "opt": opt,
                         "hook_by": dict(pr.hook_by), "rt_by": dict(pr.rt_by),
                         "calls": pr.calls, "rt_calls": pr.rt_calls})


# ------------------------------------------------------------------ report

def args_ns_flops(s, l, steps):
    """FLOPs of Newton-Schulz on an s x l matrix (s <= l): per step X X^T, B = bA + cAA,
    BX."""
    return steps * (2 * s * s * l + 2 * s * s * s + 2 * s * s * l)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=16, help="measured steps per run")
    ap.add_argument("--rounds", type=int, default=8,
                    help="the measured steps are taken in this many interleaved rounds")
    ap.add_argument("--overhead-steps", type=int, default=5,
                    help="extra mfsdp steps with the package's hooks timed")
    ap.add_argument("--cases", default="muon,adamw")
    ap.add_argument("--check-steps", type=int, default=5,
                    help="first steps whose losses must agree")
    ap.add_argument("--tol", type=float, default=0.02,
                    help="relative tolerance of the loss check")
    ap.add_argument("--fsdp2-muon", choices=("dtensor", "gather", "both"), default="both",
                    help="dtensor (FSDP2): torch.optim.Muon on FSDP2's DTensor shards as is; "
                         "gather (FSDP2-g): the same with Newton-Schulz on each matrix's "
                         "full_tensor() on every rank, the result re-sharded; both: two FSDP2 "
                         "runs")
    ap.add_argument("--fsdp2-foreach", choices=("default", "on", "off"), default="on",
                    help="torch.optim.AdamW's foreach on the FSDP2 side (on: the multi-tensor "
                         "path, what torch picks on GPUs and the faster one here; default: "
                         "torch's choice on CPU, the per-tensor loop)")
    ap.add_argument("--prefetch", action="store_true",
                    help="mfsdp: fully_shard(prefetch=True) (the runtime starts the next "
                         "unit's gather early); default off, the package's default")
    ap.add_argument("--hparams", choices=("auto", "package", "plan"), default="auto",
                    help="package: fully_shard compiles and the package passes the "
                         "hyperparameters at each step (needs the runtime's set_hparams); "
                         "plan: the library is compiled with them in its plan and passed as "
                         "fully_shard(library=); auto: package if the runtime has set_hparams")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--work-dir", default=None)
    args = ap.parse_args()

    rank, world = world_from_env()
    torch.set_num_threads(1)
    load0 = os.getloadavg()
    if "OMPI_COMM_WORLD_RANK" in os.environ:
        port, port_file = agree_on_port(rank, args.port)
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
    else:
        # torchrun: its variables; mfsdp's host backend then runs over gloo too.
        port_file = None
        dist.init_process_group("gloo", rank=rank, world_size=world)
    dist.barrier()
    if port_file:
        os.unlink(port_file)
    mrank, mworld = mrt.ranks()  # starts MPI (the runtime's backend) beside gloo
    if (mrank, mworld) != (rank, world):
        raise SystemExit(f"MPI rank {mrank}/{mworld} differs from gloo's {rank}/{world}")

    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for c in cases:
        if c not in CASES:
            raise SystemExit(f"unknown case {c!r} (muon, adamw)")

    has_set_hparams = hasattr(_C.Step, "set_hparams")
    hparams_mode = args.hparams
    if hparams_mode == "auto":
        hparams_mode = "package" if has_set_hparams else "plan"
    work_dir = args.work_dir
    if work_dir is None:
        import atexit
        import shutil
        work_dir = f"/tmp/mfsdp-bench-torch-{os.getpid()}"
        atexit.register(shutil.rmtree, work_dir, True)

    # Newton-Schulz in fp32 for torch.optim.Muon.
    torch_muon._zeropower_via_newtonschulz = ns_fp32_dispatch
    instrument_package()

    ref = build_model(args)
    n_params = sum(p.numel() for p in ref.parameters())

    t_setup = pc()
    runs = []
    plan_notes = []
    for case in cases:
        m = mfsdp_run(ref, case, args, world, rank, hparams_mode, work_dir)
        info = m.state.library.info()
        plan_notes.append((case, info))
        muon_names = {p.name for p in m.state.params if p.optimizer == _C.OPT_MUON}
        none = [p.name for p in m.state.params if p.optimizer == _C.OPT_NONE]
        if none:
            raise SystemExit(f"mfsdp plan leaves parameters without optimizer: {none}")
        if case == "muon" and args.fsdp2_muon in ("dtensor", "both"):
            runs.append(fsdp2_run(ref, case, muon_names, args, world))
        if case == "muon" and args.fsdp2_muon in ("gather", "both"):
            runs.append(fsdp2_run(ref, case, muon_names, args, world, gather=True))
        if case != "muon":
            runs.append(fsdp2_run(ref, case, muon_names, args, world))
        runs.append(m)
    t_setup = pc() - t_setup

    # Warm-up, then the measured steps in interleaved rounds (FSDP2 first in each).
    for r in runs:
        for _ in range(args.warmup):
            r.step(args, rank, world, record=False)
    per_round = [args.steps // args.rounds + (1 if i < args.steps % args.rounds else 0)
                 for i in range(args.rounds)]
    for n in per_round:
        for r in runs:
            for _ in range(n):
                r.step(args, rank, world, record=True)
    # The package's overhead, on extra steps.
    for r in runs:
        if r.framework == "mfsdp":
            for _ in range(args.overhead_steps):
                instrumented_step(r, args, rank, world)
    load1 = os.getloadavg()

    # Max over ranks of each region, per step; medians over steps.
    gathered = [None] * world
    dist.all_gather_object(gathered, [(r.times, r.overhead) for r in runs])
    if rank != 0:
        dist.barrier()
        dist.destroy_process_group()
        return

    res = {}
    for i, r in enumerate(runs):
        per_rank = [g[i][0] for g in gathered]
        nsteps = len(per_rank[0])
        mx = [[max(pr[s][k] for pr in per_rank) for s in range(nsteps)] for k in range(3)]
        cpu = [sum(pr[s][3] for pr in per_rank) / world for s in range(nsteps)]
        res[(r.framework, r.case)] = {"fb": med(mx[0]), "opt": med(mx[1]), "step": med(mx[2]),
                                     "range": (min(mx[2]), max(mx[2])), "per_step": mx,
                                     "cpu": med(cpu)}
        if r.framework == "mfsdp":
            ov = [g[i][1] for g in gathered]
            k = len(ov[0])
            py = [max(o[s]["hook"] - o[s]["rt"] for o in ov) for s in range(k)]
            hook = [max(o[s]["hook"] for o in ov) for s in range(k)]
            rt = [max(o[s]["rt"] for o in ov) for s in range(k)]
            whole = [max(o[s]["whole"] for o in ov) for s in range(k)]
            frac = [max((o[s]["hook"] - o[s]["rt"]) / o[s]["whole"] for o in ov)
                    for s in range(k)]
            by = {}
            for o in ov[0]:
                for name, v in o["hook_by"].items():
                    by.setdefault(("hook", name), []).append(v)
                for name, v in o["rt_by"].items():
                    by.setdefault(("rt", name), []).append(v)
            res[(r.framework, r.case)]["overhead"] = {
                "py": med(py), "hook": med(hook), "rt": med(rt), "whole": med(whole),
                "frac": med(frac), "by": {kk: med(v) for kk, v in by.items()},
                "calls": ov[0][0]["calls"] if k else 0, "rt_calls": ov[0][0]["rt_calls"] if k else 0}

    P = print
    P("bench-torch: FSDP2 against mfsdp.torch, measured on this host's CPU "
      f"({os.cpu_count()} cores), {world} ranks, one compute thread per rank "
      f"(torch.set_num_threads(1), OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')})")
    P(f"torch {torch.__version__}; load average at start {load0[0]:.2f}, at end {load1[0]:.2f} "
      "(1 min)")
    P(f"model: LlamaForCausalLM, {args.layers} layers, hidden {args.hidden}, intermediate "
      f"{args.intermediate}, {args.heads} heads, {args.kv_heads} kv heads, vocab {args.vocab}, "
      f"untied head; {n_params / 1e6:.2f} M parameters, fp32, random init (seed 0); seq "
      f"{args.seq}, batch {args.batch} per rank")
    P(f"steps: {args.warmup} warm-up, {args.steps} measured per run in {args.rounds} "
      "interleaved rounds (FSDP2 first in each); per step: barrier, forward+backward; barrier, "
      "optimizer.step() + zero_grad(); each region's time is the max over ranks, 'step' is "
      "from the first barrier's exit to the end of the optimizer region (the second barrier "
      "included); medians over the measured steps")
    P("FSDP2: torch.distributed.fsdp.fully_shard on each decoder layer and the root "
      "(reshard_after_forward=True), gloo; torch.optim.AdamW(foreach="
      f"{args.fsdp2_foreach}); torch.optim.Muon on the Shard(0) DTensor parameters:")
    if args.fsdp2_muon in ("dtensor", "both"):
        P("  FSDP2   : torch.optim.Muon as is: its Newton-Schulz runs on the DTensors (DTensor "
          "shards the matmuls and redistributes between them)")
    if args.fsdp2_muon in ("gather", "both"):
        P("  FSDP2-g : the same optimizer with Newton-Schulz on each matrix's full_tensor() "
          "(all-gather) on every rank, the result re-sharded with distribute_tensor("
          "src_data_rank=None): what an FSDP2 user writes to keep DTensor out of the "
          "iteration")
    P("  Newton-Schulz in fp32 on both: torch's _zeropower_via_newtonschulz (bf16) replaced "
      "by the same iteration in fp32")
    P(f"mfsdp: mfsdp.torch.fully_shard(mesh='dp_shard={world}', zero=3, policy=mixed_muon_adamw "
      f"or adamw, adamw={{...}}, muon={{...}}, prefetch={args.prefetch}), host backend (MPI + "
      "OpenBLAS), Newton-Schulz in fp32 on the matrices' owners")
    P(f"hyperparameters: Muon {MUON}; AdamW {ADAMW}")
    if hparams_mode == "plan":
        P("  compiled into the plan: the libraries were compiled with these hyperparameters "
          "in the graph's policy and passed as fully_shard(library=...)"
          + ("" if has_set_hparams else
             " (this runtime has no set_hparams, so fully_shard(adamw=, muon=) alone would "
             "not reach it and a library fully_shard compiles carries the compiler's "
             "defaults)"))
    else:
        P("  passed to fully_shard(adamw=, muon=); the package hands them to the runtime "
          f"at each step (runtime set_hparams: {has_set_hparams})")
    for case, info in plan_notes:
        a, m = info.get("adamw", {}), info.get("muon", {})
        P(f"  plan of the {case} library: adamw lr {a.get('lr', 0):.4g} betas "
          f"({a.get('betas', (0, 0))[0]:.3g}, {a.get('betas', (0, 0))[1]:.3g}) wd "
          f"{a.get('weight_decay', 0):.3g}; muon lr {m.get('lr', 0):.4g} wd "
          f"{m.get('weight_decay', 0):.3g} momentum {m.get('momentum', 0):.3g} ns_steps "
          f"{m.get('ns_steps')} {m.get('adjust_lr_fn')}; {info['num_units']} units, "
          f"{info['num_buckets']} buckets, prefetch {info['prefetch']}"
          + ("; the hyperparameters above replace these at each step (set_hparams)"
             if hparams_mode == "package" else ""))
    n_mu = sum(1 for n in runs if n.framework == "mfsdp" and n.case == "muon")
    if n_mu:
        st = [r for r in runs if r.framework == "mfsdp" and r.case == "muon"][0].state
        mus = [p for p in st.params if p.optimizer == _C.OPT_MUON]
        P(f"  Muon matrices (both sides, from the plan): {len(mus)} of {len(st.params)} "
          "parameters; the rest AdamW")
        table = {e["name"]: e for e in st.library.params()}
        load = {}
        for p in mus:
            e = table[p.name]
            s_, l_ = sorted((e["rows"], e["cols"]))
            flops = args_ns_flops(s_, l_, MUON["ns_steps"])
            n, f = load.get(e["owner"], (0, 0.0))
            load[e["owner"]] = (n + 1, f + flops)
        P("  mfsdp owners: " + "; ".join(
            f"rank {o}: {n} matrices, {f / 1e9:.2f} GFLOP of Newton-Schulz"
            for o, (n, f) in sorted(load.items())))
    P(f"setup (export, compile, load, FSDP2 wrapping): {t_setup:.1f} s")
    P("")

    # Losses.
    P(f"losses (mean over ranks) of the first {args.check_steps} steps, tolerance "
      f"{args.tol:g} relative:")
    loss_ok = True
    for case in cases:
        m = [r for r in runs if r.framework == "mfsdp" and r.case == case][0]
        for f in [r for r in runs if r.framework != "mfsdp" and r.case == case]:
            worst = 0.0
            for s in range(min(args.check_steps, len(f.losses), len(m.losses))):
                d = abs(f.losses[s] - m.losses[s]) / abs(f.losses[s])
                worst = max(worst, d)
                P(f"  {case:5s} step {s}: {f.framework:7s} {f.losses[s]:.6f}  mfsdp "
                  f"{m.losses[s]:.6f}  rel diff {d:.2e}")
            last = min(len(f.losses), len(m.losses)) - 1
            P(f"  {case:5s} step {last} (last common): {f.framework:7s} {f.losses[last]:.6f}  "
              f"mfsdp {m.losses[last]:.6f}")
            ok = worst <= args.tol
            loss_ok &= ok
            P(f"  {case:5s} {f.framework} against mfsdp: worst rel diff {worst:.2e}: "
              f"{'agree' if ok else 'DIFFER'}")
    P("")

    P("median ms (max over ranks per step); 'cpu': CPU time of the process over the step "
      "(time.process_time, all its threads, mean over ranks), beside the step's wall time")
    P(f"{'framework':10s} {'case':6s} {'fwd+bwd':>9s} {'optimizer':>10s} {'step':>9s} "
      f"{'cpu':>9s}   step range")
    for case in cases:
        for fw in [r.framework for r in runs if r.case == case]:
            x = res[(fw, case)]
            P(f"{fw:10s} {case:6s} {x['fb'] * 1e3:9.1f} {x['opt'] * 1e3:10.1f} "
              f"{x['step'] * 1e3:9.1f} {x['cpu'] * 1e3:9.1f}   "
              f"[{x['range'][0] * 1e3:.1f} .. {x['range'][1] * 1e3:.1f}]")
    P("")
    ratios = {}
    for case, fw in [(r.case, r.framework) for r in runs if r.framework != "mfsdp"]:
        f, m = res[(fw, case)], res[("mfsdp", case)]
        ratios[(fw, case)] = x = {k: f[k] / m[k] for k in ("fb", "opt", "step")}
        P(f"{fw + ' / mfsdp,':16s} {case:5s}: fwd+bwd {x['fb']:.2f}x, optimizer "
          f"{x['opt']:.2f}x, step {x['step']:.2f}x")
        # The same per round (the runs of a round are adjacent in time): the spread
        # shows how much the machine's load moved the figures.
        rr = {"opt": [], "step": []}
        pos = 0
        for n in per_round:
            for k, idx in (("opt", 1), ("step", 2)):
                fm = med(f["per_step"][idx][pos:pos + n])
                mm = med(m["per_step"][idx][pos:pos + n])
                rr[k].append(fm / mm)
            pos += n
        P(f"    per round ({len(per_round)} rounds of {per_round[0]} steps): optimizer "
          f"{min(rr['opt']):.2f}-{max(rr['opt']):.2f}x, step "
          f"{min(rr['step']):.2f}-{max(rr['step']):.2f}x")
    P("")

    P("package overhead (mfsdp, on extra instrumented steps): time inside the package's Python "
      "entry points, outermost call only (_State." + ", _State.".join(HOOKS) +
      ", MFSDPOptimizer.step, MFSDPOptimizer.zero_grad), minus the time inside calls into the "
      "runtime made from them (every method of mfsdp._C.Step: pre_forward, post_forward, "
      "pre_backward, post_backward, end_forward, optimizer_step, zero_grad, set_hparams, "
      "param_view, grad_view); what remains is Python and the torch ops the hooks run (e.g. adding "
      "autograd's gradients into the runtime's buffers). Not counted: torch's own dispatch "
      "of the module and autograd hooks. Per step the max over ranks; medians.")
    for case in cases:
        o = res[("mfsdp", case)].get("overhead")
        if not o:
            continue
        P(f"  {case:5s}: Python overhead {o['py'] * 1e3:.2f} ms of a {o['whole'] * 1e3:.1f} ms "
          f"step = {o['frac'] * 100:.2f}% (medians of the max over ranks of: entry points "
          f"{o['hook'] * 1e3:.2f} ms, runtime calls inside them {o['rt'] * 1e3:.2f} ms; "
          f"{o['calls']} entry-point calls, {o['rt_calls']} runtime calls per step)")
        hb = sorted(((k[1], v) for k, v in o["by"].items() if k[0] == "hook"), key=lambda t: -t[1])
        rb = sorted(((k[1], v) for k, v in o["by"].items() if k[0] == "rt"), key=lambda t: -t[1])
        P("         entry points (rank 0, ms): " +
          ", ".join(f"{n} {v * 1e3:.2f}" for n, v in hb))
        P("         runtime calls (rank 0, ms): " +
          ", ".join(f"{n} {v * 1e3:.2f}" for n, v in rb))
    P("")

    def target(name, value, ok):
        P(f"target {name}: {value} ({'met' if ok else 'MISSED'})")

    muon_fws = [fw for (fw, c) in ratios if c == "muon"]
    for fw in muon_fws:
        x = ratios[(fw, "muon")]
        target(f"optimizer step >= 4x {fw} (Muon)", f"{x['opt']:.2f}x", x["opt"] >= 4.0)
        target(f"whole step >= 1.5x {fw} (Muon)", f"{x['step']:.2f}x", x["step"] >= 1.5)
    if "adamw" in cases:
        x = ratios[("FSDP2", "adamw")]
        target("AdamW-only whole step no slower than FSDP2", f"{x['step']:.2f}x",
               x["step"] >= 1.0)
    fr = [res[("mfsdp", c)]["overhead"]["frac"] for c in cases
          if res[("mfsdp", c)].get("overhead")]
    if fr:
        target("package overhead <= 5% of our step",
               ", ".join(f"{c} {res[('mfsdp', c)]['overhead']['frac'] * 100:.2f}%" for c in cases),
               max(fr) <= 0.05)
    P(f"loss check: {'passed' if loss_ok else 'FAILED'}")
    if muon_fws:
        # Against torch.optim.Muon as is when it ran, else against the gathered form.
        x = ratios[("FSDP2" if "FSDP2" in muon_fws else muon_fws[0], "muon")]
        P(f"ratio optimizer {x['opt']:.2f}x step {x['step']:.2f}x")
    sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
