#!/usr/bin/env bash
# `make demo`: import a bundled model graph, print it as plan IR, print
# summaries and plans of the bundled models, predict a step, then compile the
# example model into a step library and train it for 5 steps on 2 ranks.
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/bin"
EX=examples/models

echo "== mfsdp-translate --import-mfsdp-graph $EX/tiny.json"
"$BIN/mfsdp-translate" --import-mfsdp-graph "$EX/tiny.json" -o "$BUILD/tiny.mlir"
cat "$BUILD/tiny.mlir"
echo
echo "== mfsdp-opt --mfsdp-print-summary"
"$BIN/mfsdp-opt" "$BUILD/tiny.mlir" --mfsdp-print-summary -o /dev/null
for m in llama3-8b matrixfsdp-32l moe-ep; do
  echo
  echo "== $EX/$m.json"
  "$BIN/mfsdp-translate" --import-mfsdp-graph "$EX/$m.json" |
    "$BIN/mfsdp-opt" --mfsdp-print-summary -o /dev/null
done
echo
echo "== plan: mfsdp-opt --mfsdp-assign-layouts=\"policy=mixed_muon_adamw mesh=dp_shard=8\" --mfsdp-plan-report=text (matrixfsdp-32l)"
"$BIN/mfsdp-translate" --import-mfsdp-graph "$EX/matrixfsdp-32l.json" |
  "$BIN/mfsdp-opt" --mfsdp-assign-layouts="policy=mixed_muon_adamw mesh=dp_shard=8" \
    --mfsdp-plan-report=text -o /dev/null
echo
echo "== the same plan with MatrixFSDP's owner assignment, for comparison"
"$BIN/mfsdp-translate" --import-mfsdp-graph "$EX/matrixfsdp-32l.json" |
  "$BIN/mfsdp-opt" --mfsdp-assign-layouts="policy=mixed_muon_adamw mesh=dp_shard=8 owner-strategy=matrixfsdp" \
    --mfsdp-plan-report=text -o /dev/null | grep -E "imbalance|optimizer step"
echo
echo "== mfsdp-sim: the whole step, predicted on 8x A100, against the baselines"
echo "   (Newton-Schulz in bf16 for every plan, as torch.optim.Muon runs it: --ns-precision=bf16)"
"$BIN/mfsdp-translate" --import-mfsdp-graph "$EX/matrixfsdp-32l.json" -o "$BUILD/32l.mlir"
"$BIN/mfsdp-sim" "$BUILD/32l.mlir" --profile=a100 --compare --brief --ns-precision=bf16 \
  --pipeline="policy=mixed_muon_adamw mesh=dp_shard=8"
echo
echo "== plan: HSDP (dp_replicate=2 x dp_shard=8) for the EP MoE model, ZeRO-2"
"$BIN/mfsdp-translate" --import-mfsdp-graph "$EX/moe-ep.json" |
  "$BIN/mfsdp-opt" --mfsdp-assign-layouts="mesh=dp_replicate=2,dp_shard=8,ep=2 zero=2" \
    --mfsdp-plan-report=text -o /dev/null
echo
echo "== mfsdp-translate --import-hf-config examples/hf/deepseek-v3.json --hf-experts-owned-by=ep"
"$BIN/mfsdp-translate" --import-hf-config examples/hf/deepseek-v3.json --hf-experts-owned-by=ep |
  "$BIN/mfsdp-opt" --mfsdp-print-summary -o /dev/null
echo
echo "== mfsdp-compile examples/trainer/model.json --mesh=dp_shard=2 --policy=mixed_muon_adamw -o libstep.so"
"$BIN/mfsdp-compile" examples/trainer/model.json --mesh=dp_shard=2 \
  --policy=mixed_muon_adamw -o "$BUILD/libexample-step.so" --emit-c="$BUILD/example-step.c"
sed -n '1,3p' "$BUILD/example-step.c"
grep -A3 'The static memory plan' "$BUILD/example-step.c"
echo
echo "== mpirun -np 2 mfsdp-example-trainer libstep.so: 5 steps on 2 ranks (host backend)"
MPIRUN_FLAGS=(-np 2)
if [ "$(id -u)" = 0 ]; then MPIRUN_FLAGS+=(--allow-run-as-root); fi
MPIRUN_FLAGS+=(--oversubscribe)
mpirun "${MPIRUN_FLAGS[@]}" "$BIN/mfsdp-example-trainer" "$BUILD/libexample-step.so" --steps 5
echo
echo "== mpirun -np 2 python3 examples/torch/train.py: a tiny Llama from transformers, through mfsdp.torch"
MFSDP_PYTHON_DIR="$BUILD/python" mpirun "${MPIRUN_FLAGS[@]}" python3 examples/torch/train.py --steps 10
