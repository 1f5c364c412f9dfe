#!/usr/bin/env python3
"""The watchdog through mfsdp.torch: a rank that stops calling ends the step.

Run under mpirun -np 2. A tiny Llama is sharded with
fully_shard(collective_timeout_s=2) and trained; at step 2 rank 1 stops
calling (it sleeps). Rank 0 must get an mfsdp.Error within the timeout + 5 s
(+ 5 s of slack) that names the collective that timed out and rank 1; it
prints "watchdog ok", and both ranks end without waiting for each other.
"""

import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.environ.get("MFSDP_PYTHON_DIR",
                                  os.path.join(HERE, "..", "..", "build", "python")))
# The comm's own message (which ranks did not arrive) rather than the
# call-sequence checks' exchange, which is bounded the same way.
os.environ["MFSDP_CHECK_CALLS"] = "0"

import torch  # noqa: E402

import mfsdp  # noqa: E402
import mfsdp.torch as mt  # noqa: E402
from mfsdp import runtime as rt  # noqa: E402

RANK, WORLD = rt.ranks()
TIMEOUT_S = 2.0


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2))


work = tempfile.mkdtemp(prefix=f"mfsdp-watchdog-{RANK}-")
model, opt = mt.fully_shard(llama(), mesh=f"dp_shard={WORLD}", work_dir=work,
                            collective_timeout_s=TIMEOUT_S)
ids = torch.randint(0, 64, (2, 8))
failure = None
t0 = None
try:
    for step in range(6):
        if step == 2:
            t0 = time.monotonic()
            if RANK == 1:
                time.sleep(TIMEOUT_S + 8)  # stops calling mfsdp
                shutil.rmtree(work, True)
                os._exit(0)
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    failure = "no error: rank 0 trained past the stalled rank"
except Exception as e:  # noqa: BLE001  (autograd may wrap the hook's error)
    took = time.monotonic() - (t0 or time.monotonic())
    msg = str(e)
    words = ["failed (comm)", f"did not complete within {int(TIMEOUT_S * 1000)} ms",
             "rank 1 did not answer"]
    missing = [w for w in words if w not in msg]
    if missing:
        failure = f"the error lacks {missing}: {type(e).__name__}: {msg}"
    elif took > TIMEOUT_S + 10:
        failure = f"the error came {took:.1f} s after rank 1 stopped (bound {TIMEOUT_S + 10} s)"
    else:
        print(f"watchdog ok: {took:.1f} s: {msg.splitlines()[0][:300]}", flush=True)
shutil.rmtree(work, True)
if failure:
    print(f"FAILED: {failure}", flush=True)
# The runtime is unusable after a timeout: end without finalising MPI, which
# would wait for the stalled rank.
os._exit(1 if failure else 0)
