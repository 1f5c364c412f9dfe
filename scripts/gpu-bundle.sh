#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs into a folder that a GPU machine
# without the compiler's dependencies can use (`gpu-check.sh --prebuilt`).
#
#   scripts/gpu-bundle.sh BUILD_DIR OUT_DIR
#
# BUILD_DIR is a build with the CUDA backend (MFSDP_CUDA=ON or AUTO where
# nvcc and NCCL are found). OUT_DIR gets bin/ (mfsdp-check-cuda-kernels,
# mfsdp-parity, and mfsdp-bench-cuda-kernels where it was built), lib/
# (libmfsdp_rt, libmfsdp_rt_cuda and every shared library they load that is
# not part of the C and C++ runtime, the driver, cuBLAS or
# NCCL: those the GPU machine has, the last two under its CUDA prefix or in
# Python's nvidia-* packages) and BUNDLE, naming the commit. Binaries are
# stripped.
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: scripts/gpu-bundle.sh BUILD_DIR OUT_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
build=$1
out=$2
for f in bin/mfsdp-check-cuda-kernels bin/mfsdp-parity lib/libmfsdp_rt.so lib/libmfsdp_rt_cuda.so; do
  if [ ! -e "$build/$f" ]; then
    echo "gpu-bundle: $build/$f is missing: build with the CUDA backend first" >&2
    exit 1
  fi
done
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
cp "$build/bin/mfsdp-check-cuda-kernels" "$build/bin/mfsdp-parity" "$out/bin/"
# The kernel timing (scripts/gpu-kernel-bench.py), where it was built.
if [ -e "$build/bin/mfsdp-bench-cuda-kernels" ]; then
  cp "$build/bin/mfsdp-bench-cuda-kernels" "$out/bin/"
fi
cp -L "$build/lib/libmfsdp_rt.so" "$build/lib/libmfsdp_rt_cuda.so" "$out/lib/"

# The libraries the GPU machine brings itself.
skip='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libnccl)\.so'
for f in "$out"/bin/* "$out"/lib/libmfsdp_rt*.so; do
  LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$f" |
    awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  if [[ ! "$name" =~ $skip ]] && [ ! -e "$out/lib/$name" ]; then
    cp -L "$path" "$out/lib/$name"
  fi
done
strip --strip-unneeded "$out"/bin/* "$out"/lib/*.so* 2>/dev/null || true
echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' with local changes')" >"$out/BUNDLE"
echo "gpu-bundle: $out ($(du -sh "$out" | cut -f1)): $(ls "$out/lib" | tr '\n' ' ')"
