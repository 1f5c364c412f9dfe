#!/usr/bin/env bash
# `make demo`: import a bundled model graph, print it as plan IR, and print
# summaries of the bundled models.
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
echo "== mfsdp-translate --import-hf-config examples/hf/deepseek-v3.json --hf-experts-owned-by=ep"
"$BIN/mfsdp-translate" --import-hf-config examples/hf/deepseek-v3.json --hf-experts-owned-by=ep |
  "$BIN/mfsdp-opt" --mfsdp-print-summary -o /dev/null
