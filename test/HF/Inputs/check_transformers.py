"""Compares --import-hf-config with the model the installed transformers (5.x)
builds from the same config.json: every parameter of
`named_parameters(remove_duplicate=False)`, in order, with its shape, and the
tied head. The graph writes a fused expert tensor N [E, A, B] as its matrices
(N.{e}.gate and N.{e}.up for gate_up_proj, else N.{e}); they are put back
together here by that naming before comparing.

usage: check_transformers.py MFSDP_TRANSLATE CONFIG.json..."""
import json
import re
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import transformers  # noqa: E402

_SPLIT = re.compile(r"(.*)\.(\d+)(?:\.(gate|up))?\Z")


def fused(params):
    """[name, shape, tied_to] of a graph's parameters, with the matrices of
    each fused expert tensor put back into it (they must come e-major, gate
    before up, from expert 0 on)."""
    out = []
    for p in params:
        m = _SPLIT.match(p["name"]) if p["kind"] == "expert" else None
        if not m or _parent(m.group(1)) != p["module"]:
            out.append([p["name"], list(p["shape"]), p.get("tied_to")])
            continue
        base, e, half = m.group(1), int(m.group(2)), m.group(3)
        rows, cols = p["shape"]
        whole = [rows * (2 if half else 1), cols]  # one expert's slice
        last = out[-1] if out and out[-1][0] == base else None
        if half == "up":
            ok = (last is not None and last[1][0] == e + 1 and last[3] == "gate"
                  and last[1][1:] == whole)
        elif last is None:
            ok = e == 0
            if ok:
                last = [base, [0] + whole, None, None]
                out.append(last)
        else:
            ok = last[1][0] == e and last[3] != "gate" and last[1][1:] == whole
        if not ok:
            sys.exit(f"FAIL: {p['name']} is out of order")
        if half != "up":
            last[1][0] += 1
        last[3] = half
    return [tuple(x[:3]) for x in out]


def _parent(name):
    return name.rsplit(".", 1)[0]


def main():
    translate, configs = sys.argv[1], sys.argv[2:]
    failures = 0
    for path in configs:
        cfg = json.load(open(path))
        conf = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"})
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(conf)
        ids = {}
        want = []
        for n, p in model.named_parameters(remove_duplicate=False):
            want.append((n, list(p.shape), ids.get(id(p))))
            ids.setdefault(id(p), n)
        text = subprocess.check_output(
            f"{translate} --import-hf-config {path} | {translate} --export-mfsdp-graph",
            shell=True, text=True)
        got = fused(json.loads(text)["params"])
        name = path.rsplit("/", 1)[-1]
        if got != want:
            failures += 1
            for i, (g, w) in enumerate(zip(got, want)):
                if g != w:
                    print(f"FAIL: {name}: parameter {i}: graph {g}, transformers {w}")
                    break
            else:
                print(f"FAIL: {name}: {len(got)} parameters, transformers has {len(want)}")
        else:
            print(f"ok {name}: {len(want)} parameters")
    if failures:
        sys.exit(1)
    print(f"transformers {transformers.__version__}: all {len(configs)} configs match")


main()
