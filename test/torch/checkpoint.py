#!/usr/bin/env python3
"""Checkpoints and HF weights through mfsdp.torch, as a trainer meets them.

Run under mpirun -np 2 with a tiny transformers Llama:
  resume   3 steps, save_checkpoint (with a user dict), a fresh model and
           optimizer load_checkpoint, 3 more steps: the losses equal an
           uninterrupted 6-step run's exactly, and the user dict comes back;
  hf       export_hf after the 6 steps: transformers' from_pretrained loads
           the directory, its parameters equal the trained ones bit for bit
           (fp32) and its logits equal the sharded model's; with
           dtype=torch.bfloat16 the files hold bf16 tensors; the C ABI's
           mfsdp_export_hf writes the same tensors (one file, shards with an
           index, bf16), which from_pretrained loads;
  hf in    weights transformers saved (fp32 and bf16) load with load_hf,
           each rank reading its rows, equal bit for bit; Qwen3-MoE's and
           Mixtral's experts (per-expert files, or fused 3-D tensors) into
           the matrices the plan holds;
  errors   saving over an existing directory, loading a missing one, a
           damaged one (which leaves the state as it was); HF
           files with a tensor missing, another shape, a matrix transposed,
           truncated, data offsets before the data.
Prints "checkpoint ok" when every check passed on this rank.
"""

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("MFSDP_PYTHON_DIR",
                                  os.path.join(HERE, "..", "..", "build", "python")))

import torch  # noqa: E402

import mfsdp  # noqa: E402
import mfsdp.torch as mt  # noqa: E402
from mfsdp import runtime as rt  # noqa: E402

RANK, WORLD = rt.ranks()
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    elif RANK == 0:
        print("ok:", what, flush=True)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2))


def moe(kind, seed):
    import transformers as tf
    torch.manual_seed(seed)
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=48,
                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  num_experts_per_tok=2, tie_word_embeddings=False)
    if kind == "qwen3-moe":
        return tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(
            **common, head_dim=8, num_experts=4, moe_intermediate_size=16,
            decoder_sparse_step=1))
    return tf.MixtralForCausalLM(tf.MixtralConfig(**common, num_local_experts=4))


# The same directory on every rank (mpirun on one host): rank 0's temp dir
# name would differ, so it is made from a fixed place under the build's tmp.
root = os.path.join(tempfile.gettempdir(), f"mfsdp-ckpt-test-{os.getppid()}")
if RANK == 0:
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
work = os.path.join(root, f"lib-{RANK}")


def batch(step):
    g = torch.Generator().manual_seed(1000 + 10 * step + RANK)
    return torch.randint(0, 64, (2, 8), generator=g)


def train(model, opt, steps, first=0):
    losses = []
    for s in range(first, first + steps):
        ids = batch(s)
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return losses


model, opt = mt.fully_shard(llama(), mesh=f"dp_shard={WORLD}", policy="adamw",
                            work_dir=work + "-a")
whole = train(model, opt, 6)
# torch's own state dicts would hold the meta placeholders and load nothing:
# refused, naming what does it; so is a requires_grad changed after
# fully_shard (the plan would go on stepping the parameter), at the next
# forward, and the forward after it is set back runs.
for what, call in (("model.state_dict", lambda: model.state_dict()),
                   ("model.load_state_dict", lambda: model.load_state_dict({})),
                   ("optimizer.state_dict", lambda: opt.state_dict()),
                   ("optimizer.load_state_dict", lambda: opt.load_state_dict({}))):
    try:
        call()
        check(False, f"{what}() is refused")
    except mfsdp.Error as e:
        check("full_state_dict" in str(e) or "checkpoint" in str(e),
              f"{what}() is refused, naming what does it ({str(e)[:90]})")
norm = model.model.norm.weight
norm.requires_grad_(False)
try:
    model(input_ids=batch(0), labels=batch(0))
    check(False, "a forward after requires_grad changed is refused")
except mfsdp.Error as e:
    check("'model.norm.weight': requires_grad changed to False after fully_shard" in str(e),
          f"a forward after requires_grad changed is refused ({str(e)[:100]})")
norm.requires_grad_(True)
check(len(train(model, opt, 1, first=6)) == 1, "set back, the next step runs")
model.mfsdp_state.step.close()

model, opt = mt.fully_shard(llama(), mesh=f"dp_shard={WORLD}", policy="adamw",
                            work_dir=work + "-b")
first = train(model, opt, 3)
ck = os.path.join(root, "ck")
model.save_checkpoint(ck, {"next_step": 3})
try:
    model.save_checkpoint(ck, {"next_step": 3})
    check(False, "saving over an existing checkpoint is refused")
except mfsdp.Error as e:
    # Rank 0 names the directory; the others hear that a rank failed.
    check("exists" in str(e) if RANK == 0 else "mfsdp_save" in str(e),
          "saving over an existing checkpoint is refused")
model.mfsdp_state.step.close()

model, opt = mt.fully_shard(llama(), mesh=f"dp_shard={WORLD}", policy="adamw",
                            work_dir=work + "-c")
user = model.load_checkpoint(ck)
check(user == {"next_step": 3}, f"the user dict comes back ({user})")
rest = train(model, opt, 3, first=3)
check(first + rest == whole,
      f"resumed losses equal the uninterrupted run's exactly ({first + rest} vs {whole})")
try:
    model.load_checkpoint(os.path.join(root, "missing"))
    check(False, "loading a missing checkpoint is an error")
except mfsdp.Error as e:
    check("mfsdp_load" in str(e), "loading a missing checkpoint is an error")
# A damaged checkpoint: one byte of the last rank's data flipped. The load
# fails on every rank and leaves every rank's state as it was (rank 0's
# pieces are intact: it must not have taken them).
damaged = os.path.join(root, "ck-damaged")
if RANK == 0:
    shutil.copytree(ck, damaged)
    f = os.path.join(damaged, "rank-%05d.safetensors" % (WORLD - 1))
    with open(f, "r+b") as fh:
        fh.seek(os.path.getsize(f) - 5)
        b = fh.read(1)
        fh.seek(os.path.getsize(f) - 5)
        fh.write(bytes([b[0] ^ 0x40]))
before = model.full_state_dict()  # collective: rank 0's copy is written
try:
    model.load_checkpoint(damaged)
    check(False, "loading a damaged checkpoint is an error")
except mfsdp.Error as e:
    check("checksum" in str(e) or (RANK != WORLD - 1 and "mfsdp_load" in str(e)),
          f"loading a damaged checkpoint is an error naming the checksum ({e})")
after = model.full_state_dict()
check(all(torch.equal(before[k], after[k]) for k in before),
      "a failed load leaves every parameter as it was")

# HF weights: from_pretrained loads them, bit for bit.
hf = os.path.join(root, "hf")
model.export_hf(hf)
trained = model.full_state_dict()
ids = batch(99)
with torch.no_grad():
    ours = model(input_ids=ids).logits
if RANK == 0:
    from transformers import AutoModelForCausalLM
    loaded = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32)
    theirs = dict(loaded.named_parameters())
    same = all(torch.equal(theirs[k].detach(), trained[k]) for k in theirs)
    check(same and set(theirs) <= set(trained),
          f"from_pretrained loads the exported weights bit for bit ({len(theirs)} tensors)")
    with torch.no_grad():
        logits = loaded(input_ids=ids).logits
    check(torch.equal(logits, ours), "the loaded model's logits equal the sharded model's")
hf16 = os.path.join(root, "hf16")
model.export_hf(hf16, dtype=torch.bfloat16)
if RANK == 0:
    from safetensors import safe_open
    with safe_open(os.path.join(hf16, "model.safetensors"), framework="pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}
    check(dtypes == {torch.bfloat16}, f"dtype=bfloat16 writes bf16 tensors ({dtypes})")
# The C ABI's export (mfsdp_export_hf, what a C++ trainer calls): the same
# tensors, written by the runtime; in one file, in shards with an index,
# and in bf16. With the model's config.json beside them from_pretrained
# loads them.
c_one, c_shards, c_bf16 = (os.path.join(root, n) for n in ("c-hf", "c-hf-shards", "c-hf16"))
rt_step = model.mfsdp_state.step
rt_step.export_hf(c_one)
rt_step.export_hf(c_shards, max_shard_bytes=8192)
rt_step.export_hf(c_bf16, bf16=True)
try:
    rt_step.export_hf(c_one)
    check(False, "mfsdp_export_hf into an existing directory is refused")
except mfsdp.Error as e:
    check("exists" in str(e) if RANK == 0 else "mfsdp_export_hf" in str(e),
          "mfsdp_export_hf into an existing directory is refused")
if RANK == 0:
    import json
    from safetensors.torch import load_file
    for d in (c_one, c_shards, c_bf16):
        shutil.copy(os.path.join(hf, "config.json"), d)
    py = load_file(os.path.join(hf, "model.safetensors"))
    c = load_file(os.path.join(c_one, "model.safetensors"))
    check(set(c) == set(py) and all(torch.equal(c[k], py[k]) and c[k].shape == py[k].shape
                                    for k in py),
          f"mfsdp_export_hf writes what save_pretrained writes: names, shapes, values "
          f"({len(c)} tensors)")
    with open(os.path.join(c_shards, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    files = sorted(set(weight_map.values()))
    check(len(files) > 1 and set(weight_map) == set(py),
          f"max_shard_bytes splits the weights into {len(files)} shards with an index")
    for d, dtype in ((c_one, torch.float32), (c_shards, torch.float32),
                     (c_bf16, torch.bfloat16)):
        loaded = AutoModelForCausalLM.from_pretrained(d, torch_dtype=dtype)
        ok = all(torch.equal(p.detach(), trained[k].to(dtype))
                 for k, p in loaded.named_parameters())
        check(ok, f"from_pretrained loads the C ABI's export {os.path.basename(d)} "
                  f"({dtype}) equal to the trained weights")
model.mfsdp_state.step.close()

# HF weights in: a model saved by transformers (other values: seed 7), loaded
# with each rank reading only its rows, equals it bit for bit; bf16 files too.
src = os.path.join(root, "src")
src16 = os.path.join(root, "src16")
if RANK == 0:
    torch.manual_seed(7)
    from transformers import LlamaConfig, LlamaForCausalLM
    other = LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2))
    other.save_pretrained(src, safe_serialization=True)
    other.to(torch.bfloat16).save_pretrained(src16, safe_serialization=True)  # in place
    # Broken copies: a tensor missing, a shape changed, a file truncated.
    from safetensors.torch import load_file, save_file
    tensors = load_file(os.path.join(src, "model.safetensors"))
    gate = "model.layers.0.mlp.gate_proj.weight"  # [48, 32]
    for name, edit in (("missing", lambda t: t.pop("model.norm.weight")),
                       ("shape", lambda t: t.__setitem__(
                           "model.norm.weight", torch.zeros(31))),
                       # As many elements, the other way round.
                       ("transposed", lambda t: t.__setitem__(
                           gate, t[gate].t().contiguous()))):
        d = os.path.join(root, name)
        os.makedirs(d)
        t = dict(tensors)
        edit(t)
        save_file(t, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    d = os.path.join(root, "truncated")
    os.makedirs(d)
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        data = f.read()
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(data[:len(data) - 100])
    # data_offsets that start before the data section: the header's own
    # bytes would be read as weights.
    import json
    import struct
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header["model.norm.weight"]["data_offsets"] = [-64, 64]
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    d = os.path.join(root, "offsets")
    os.makedirs(d)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data[8 + n:])
model, opt = mt.fully_shard(llama(), mesh=f"dp_shard={WORLD}", policy="adamw",
                            work_dir=work + "-d")
# Every rank waits for rank 0's files: a collective after they are written.
model.full_state_dict()
model.load_hf(src)
mine = model.full_state_dict()
model.load_hf(src16)
mine16 = model.full_state_dict()
if RANK == 0:
    ref = {k: v.detach() for k, v in
           LlamaForCausalLM.from_pretrained(src).named_parameters()}
    check(all(torch.equal(mine[k], ref[k]) for k in ref),
          "load_hf reads transformers' save_pretrained weights bit for bit")
    ref16 = {k: v.detach().to(torch.bfloat16).to(torch.float32) for k, v in
             LlamaForCausalLM.from_pretrained(src16).named_parameters()}
    check(all(torch.equal(mine16[k], ref16[k]) for k in ref16),
          "load_hf widens bf16 files exactly")
for name, words in (("missing", "lacks the plan's parameters model.norm.weight"),
                    ("shape", "'model.norm.weight' has 31 elements"),
                    ("transposed", "'model.layers.0.mlp.gate_proj.weight' has 1536 "
                                   "elements (shape [32, 48]"),
                    ("truncated", "the file is truncated"),
                    ("offsets", "'model.norm.weight' has data_offsets [-64, 64]")):
    try:
        model.load_hf(os.path.join(root, name))
        check(False, f"load_hf of a {name} file is an error")
    except mfsdp.Error as e:
        check(words in str(e) or (RANK != 0 and "mfsdp_load_hf" in str(e)),
              f"load_hf of a {name} file is an error naming it ({str(e)[:160]})")
model.mfsdp_state.step.close()

# MoE: transformers 5's fused experts (gate_up_proj [E, 2I, H], down_proj
# [E, H, I]) are planned as their matrices; save_pretrained writes them one
# tensor per expert (Qwen3-MoE: experts.{e}.gate_proj.weight ...; Mixtral:
# block_sparse_moe.experts.{e}.w1.weight ... and block_sparse_moe.gate), and
# load_hf reads those, or the fused 3-D tensors as they are in memory.
for kind in ("qwen3-moe", "mixtral"):
    src = os.path.join(root, "hf-" + kind)
    source = moe(kind, 3)
    if RANK == 0:
        source.save_pretrained(src, safe_serialization=True)
        from safetensors.torch import save_file
        os.makedirs(src + "-fused")
        save_file({k: v.detach().contiguous() for k, v in source.state_dict().items()},
                  os.path.join(src + "-fused", "model.safetensors"),
                  metadata={"format": "pt"})
    model, opt = mt.fully_shard(moe(kind, 1), mesh=f"dp_shard={WORLD}",
                                policy="mixed_muon_adamw", work_dir=work + "-" + kind)
    check(any(p.fused is not None for p in model.mfsdp_state.params),
          f"{kind}: the plan holds the fused experts as matrices")
    model.full_state_dict()  # every rank waits for rank 0's files
    model.load_hf(src)
    mine = model.full_state_dict()
    model.load_hf(src + "-fused")
    fused_in = model.full_state_dict()
    if RANK == 0:
        ref = {k: v.detach() for k, v in
               type(source).from_pretrained(src).named_parameters()}
        fused = [k for k in ref if k.endswith("gate_up_proj") or k.endswith("down_proj")]
        check(len(fused) >= 2 and all(ref[k].dim() == 3 for k in fused),
              f"{kind}: the model holds fused 3-D expert tensors ({len(fused)})")
        from safetensors import safe_open
        with safe_open(os.path.join(src, "model.safetensors"), "pt") as f:
            per_expert = [k for k in f.keys() if ".experts.0." in k]
        check(len(per_expert) == 3 * 2,
              f"{kind}: save_pretrained wrote one tensor per expert ({per_expert[:3]})")
        check(set(mine) == set(ref) and all(torch.equal(mine[k], ref[k]) for k in ref),
              f"{kind}: load_hf reads the per-expert tensors into the plan's matrices "
              "bit for bit")
        check(set(fused_in) == set(ref) and
              all(torch.equal(fused_in[k], ref[k]) for k in ref),
              f"{kind}: load_hf reads fused 3-D expert tensors bit for bit")
    # Out again through the C ABI: the expert matrices become the fused 3-D
    # tensors, which from_pretrained loads.
    out = os.path.join(root, "c-hf-" + kind)
    model.mfsdp_state.step.export_hf(out)
    if RANK == 0:
        shutil.copy(os.path.join(src, "config.json"), out)
        again = {k: v.detach() for k, v in
                 type(source).from_pretrained(out).named_parameters()}
        check(set(again) == set(ref) and all(torch.equal(again[k], ref[k]) for k in ref),
              f"{kind}: mfsdp_export_hf writes the fused experts that from_pretrained "
              "loads bit for bit")
    model.mfsdp_state.step.close()

if RANK == 0:
    shutil.rmtree(root, ignore_errors=True)
for f in failures:
    print(f"rank {RANK}: FAILED: {f}", flush=True)
if not failures:
    print(f"rank {RANK}: checkpoint ok", flush=True)
sys.exit(1 if failures else 0)
