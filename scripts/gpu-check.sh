#!/usr/bin/env bash
# GPU readiness check of the CUDA backend.
#
#   scripts/gpu-check.sh [--detect-only] [BUILD_DIR]
#
# On a machine where nvidia-smi finds a GPU: configures BUILD_DIR (default
# build-gpu) with the CUDA kernels and backend required (-DMFSDP_CUDA=ON),
# builds what the checks need, then
#   1. runs every CUDA kernel against its host twin (mfsdp-check-cuda-kernels:
#      the optimizer kernels, Newton-Schulz in fp32 and bf16, symmetric and
#      GEMM forms, the casts, scaling and block packing);
#   2. runs the world-size-1 parity cases of test/CMakeLists.txt on the CUDA
#      backend (mfsdp-parity under mpirun -np 1 with MFSDP_PARITY_BACKEND=cuda,
#      the arena in managed memory so the driver's host code reads the views).
# Writes a summary to stdout and to BUILD_DIR/gpu-check-summary.txt, with the
# machine (nvidia-smi -L, the driver, the CPU) named; exits 1 when a step
# fails. Without a GPU it says so and exits 0, building nothing; with
# --detect-only it only says whether there is one (the ctest entry).
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
detect_only=0
if [ "${1:-}" = "--detect-only" ]; then
  detect_only=1
  shift
fi
build=${1:-$root/build-gpu}

gpus=""
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep '^GPU ' || true)
fi
if [ -z "$gpus" ]; then
  echo "gpu-check: no GPU found (nvidia-smi lists none); nothing built or run."
  echo "gpu-check: the CUDA backend is compiled and linked but has never run."
  exit 0
fi
if [ "$detect_only" = 1 ]; then
  echo "gpu-check: GPU found:"
  echo "$gpus"
  echo "gpu-check: run scripts/gpu-check.sh without --detect-only to check the CUDA backend."
  exit 0
fi

mkdir -p "$build"
summary="$build/gpu-check-summary.txt"
log="$build/gpu-check.log"
: >"$summary"
: >"$log"
say() { echo "$*" | tee -a "$summary"; }
failed=0

say "gpu-check: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
say "$gpus"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
say "driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1), nvcc $("$nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"

# Configure and build (the CUDA kernels and backend are required).
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMFSDP_CUDA=ON \
    -DPython_EXECUTABLE="$(command -v python3)" >>"$log" 2>&1; then
  say "configure: FAILED (see $log)"
  exit 1
fi
if ! cmake --build "$build" -j "$(nproc)" --target mfsdp_rt mfsdp_rt_cuda \
    mfsdp-check-cuda-kernels mfsdp-parity >>"$log" 2>&1; then
  say "build: FAILED (see $log)"
  exit 1
fi
say "configure and build: ok ($build)"

# 1. Every CUDA kernel against its host twin.
out=$("$build/bin/mfsdp-check-cuda-kernels" 2>&1)
rc=$?
echo "$out" >>"$log"
echo "$out" | grep -v ' ok (' >>"$summary"
echo "$out"
if [ $rc -ne 0 ]; then
  say "kernels: FAILED (exit $rc)"
  failed=1
else
  say "kernels: ok"
fi

# 2. The world-size-1 parity cases on the CUDA backend.
mpirun=(mpirun -np 1)
if [ "$(id -u)" = 0 ]; then
  mpirun+=(--allow-run-as-root --oversubscribe)
fi
cases=$(grep -o '"1|dp_shard=1|[^"]*"' "$root/test/CMakeLists.txt" | tr -d '"' | sort -u)
if [ -z "$cases" ]; then
  say "parity: no world-size-1 cases found in test/CMakeLists.txt"
  failed=1
fi
for case in $cases; do
  IFS='|' read -r -a fields <<<"$case"
  args=("${fields[@]:1}")
  line=$(MFSDP_PARITY_BACKEND=cuda MFSDP_CUDA_MANAGED_ARENA=1 timeout 600 \
    "${mpirun[@]}" "$build/bin/mfsdp-parity" "${args[@]}" 2>&1)
  rc=$?
  echo "$line" >>"$log"
  result=$(echo "$line" | grep '^parity ' | tail -1)
  if [ $rc -eq 0 ]; then
    say "parity cuda ${args[*]}: ok: ${result#parity }"
  else
    say "parity cuda ${args[*]}: FAILED (exit $rc): ${result:-$(echo "$line" | tail -3)}"
    failed=1
  fi
done

if [ $failed -ne 0 ]; then
  say "gpu-check: FAILED (details in $log)"
  exit 1
fi
say "gpu-check: every check passed; record these figures in docs/benchmarks.md with the machine."
exit 0
