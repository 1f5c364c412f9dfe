"""Writes the inputs of text-limits.test into the directory argv[1]."""
import copy
import json
import sys

out, tiny = sys.argv[1], sys.argv[2]
base = json.load(open(tiny))


def write(name, text):
    with open(f"{out}/{name}", "w") as f:
        f.write(text)


head = '{\n "format": "mfsdp.graph",\n "version": 1,\n'
# Line 4: "params" opens 50,000 nested arrays; the 64th is refused.
write("deep.json", head + ' "params": [' + "[" * 50000 + "]" * 50000 + "]\n}\n")
# Line 5: "model" a second time.
write("dupkey.json", head + ' "model": "a",\n "model": "b"\n}\n')
# Line 5: a number no double holds.
write("big.json", head + ' "model": "m",\n "seq_len": 1e400\n}\n')
g = copy.deepcopy(base)
old = g["params"][1]["name"]
g["params"][1]["name"] = "b\u0000x"
for u in g["units"]:
    u["params"] = ["b\u0000x" if p == old else p for p in u["params"]]
write("nul.json", json.dumps(g, indent=1))
g = copy.deepcopy(base)
g["params"][1]["name"] = "a" * 1000000
write("longname.json", json.dumps(g))
write("hf-dup.json", '{\n  "model_type": "llama",\n  "hidden_size": 64,\n  "hidden_size": 128\n}\n')
