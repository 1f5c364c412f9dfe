#!/usr/bin/env bash
# GPU readiness check of the CUDA backend.
#
#   scripts/gpu-check.sh [--detect-only] [--prebuilt] [BUILD_DIR]
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
# With --prebuilt, BUILD_DIR is not configured or built: it holds bin/ and
# lib/ as scripts/gpu-bundle.sh packs them on a build machine, for a GPU
# machine without the compiler's dependencies (MLIR, MPI, OpenBLAS). The
# libraries the bundle leaves out (libcuda, cuBLAS, NCCL) are looked up under
# the CUDA prefix and in Python's nvidia-* packages. Without mpirun the
# parity cases run as one torchrun rank (RANK=0, WORLD_SIZE=1; the CUDA
# backend bootstraps NCCL through the torchrun control plane).
# Writes a summary to stdout and to BUILD_DIR/gpu-check-summary.txt, with the
# machine (nvidia-smi -L, the driver, the CPU) named; exits 1 when a step
# fails. Without a GPU it says so and exits 0, building nothing; with
# --detect-only it only says whether there is one (the ctest entry).
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
detect_only=0
prebuilt=0
while [ $# -gt 0 ]; do
  case "$1" in
    --detect-only) detect_only=1; shift ;;
    --prebuilt) prebuilt=1; shift ;;
    *) break ;;
  esac
done
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

# Configure and build (the CUDA kernels and backend are required), or use
# a bundle.
if [ "$prebuilt" = 1 ]; then
  for f in bin/mfsdp-check-cuda-kernels bin/mfsdp-parity lib/libmfsdp_rt.so lib/libmfsdp_rt_cuda.so; do
    if [ ! -e "$build/$f" ]; then
      say "prebuilt: $build/$f is missing (scripts/gpu-bundle.sh makes the bundle)"
      exit 1
    fi
  done
  libs="$build/lib"
  for want in libnccl.so.2 libcublas.so.13 libcublasLt.so.13; do
    found=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \
      $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
      -name "$want" 2>/dev/null | head -1)
    if [ -n "$found" ]; then
      libs="$libs:$(dirname "$found")"
    else
      say "prebuilt: $want not found on this machine"
    fi
  done
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "prebuilt bundle: $build (built $(cat "$build/BUNDLE" 2>/dev/null || echo 'at an unknown commit'))"
  say "libraries: $LD_LIBRARY_PATH"
elif ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMFSDP_CUDA=ON \
    -DPython_EXECUTABLE="$(command -v python3)" >>"$log" 2>&1; then
  say "configure: FAILED (see $log)"
  exit 1
elif ! cmake --build "$build" -j "$(nproc)" --target mfsdp_rt mfsdp_rt_cuda \
    mfsdp-check-cuda-kernels mfsdp-parity >>"$log" 2>&1; then
  say "build: FAILED (see $log)"
  exit 1
else
  say "configure and build: ok ($build)"
fi

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
# MFSDP_GPU_CHECK_LAUNCH=torchrun takes the torchrun way even where mpirun is.
if [ "${MFSDP_GPU_CHECK_LAUNCH:-}" != torchrun ] && command -v mpirun >/dev/null 2>&1; then
  launch=(mpirun -np 1)
  if [ "$(id -u)" = 0 ]; then
    launch+=(--allow-run-as-root --oversubscribe)
  fi
  extra=()
  say "parity launcher: mpirun -np 1"
else
  launch=(env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1
    MASTER_PORT=$((29500 + RANDOM % 1000)))
  extra=(torchrun)
  say "parity launcher: no mpirun; one torchrun rank"
fi
cases=$(grep -o '"1|dp_shard=1|[^"]*"' "$root/test/CMakeLists.txt" | tr -d '"' | sort -u)
# And at world size 1 what the test list runs only on larger meshes: bf16
# compute copies, buckets, prefetch depth 2, clipping, Muon, accumulation.
cases="$cases
1|dp_shard=1|adamw|3|1|bf16
1|dp_shard=1|adamw|3|1|buckets
1|dp_shard=1|adamw|3|2|clip
1|dp_shard=1|adamw|2|1|prefetch|depth=2
1|dp_shard=1|muon|3|1
1|dp_shard=1|muon|3|1|bf16
1|dp_shard=1|mixed_muon_adamw|3|1|bf16|buckets"
if [ -z "$cases" ]; then
  say "parity: no world-size-1 cases found in test/CMakeLists.txt"
  failed=1
fi
for case in $cases; do
  IFS='|' read -r -a fields <<<"$case"
  args=("${fields[@]:1}")
  line=$(MFSDP_PARITY_BACKEND=cuda MFSDP_CUDA_MANAGED_ARENA=1 timeout 300 \
    "${launch[@]}" "$build/bin/mfsdp-parity" "${args[@]}" "${extra[@]}" 2>&1)
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
