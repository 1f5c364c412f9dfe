#!/usr/bin/env bash
# Regenerates the graphs in examples/models from the generator and the
# bundled config.json files. test/Examples/up-to-date.test checks that the
# committed files equal what this script writes.
set -euo pipefail
BIN=${1:-build/bin}
OUT=${2:-examples/models}
mkdir -p "$OUT"
# The tiny model every fast test uses: GQA, untied, with a mesh and policy.
"$BIN/mfsdp-graphgen" --arch llama --name tiny --layers 2 --hidden 64 \
  --heads 4 --kv-heads 2 --intermediate 128 --vocab 256 --seq-len 128 \
  --mesh dp_shard=4 --policy mixed_muon_adamw --zero 3 -o "$OUT/tiny.json"
# The MatrixFSDP benchmark model: 32 layers, hidden 4096, intermediate 16384,
# 32 heads, LayerNorm + GELU MLP, no embedding, activation checkpointing.
"$BIN/mfsdp-graphgen" --arch gpt_bench --name matrixfsdp-32l --layers 32 \
  --hidden 4096 --heads 32 --intermediate 16384 --vocab 0 --seq-len 4096 \
  --recompute --mesh dp_shard=8 --policy mixed_muon_adamw -o "$OUT/matrixfsdp-32l.json"
# Llama-3-8B from its config.json.
"$BIN/mfsdp-translate" --import-hf-config examples/hf/llama-3-8b.json \
  --hf-model-name llama3-8b |
  "$BIN/mfsdp-translate" --export-mfsdp-graph -o "$OUT/llama3-8b.json"
# An MoE model whose routed experts are owned by expert parallelism.
"$BIN/mfsdp-graphgen" --arch qwen3_moe --name moe-ep --layers 4 --hidden 1024 \
  --heads 16 --kv-heads 4 --intermediate 2816 --experts 16 --top-k 4 \
  --moe-intermediate 512 --vocab 32000 --experts-owned-by ep \
  --mesh dp_shard=4,ep=2 --policy mixed_muon_adamw -o "$OUT/moe-ep.json"
