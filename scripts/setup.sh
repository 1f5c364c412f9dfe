#!/usr/bin/env bash
# Installs what the build and the tests need, and nothing when it is all there.
# Idempotent; runs `apt-get update` at most once per call, and only when a
# package is missing.
set -euo pipefail

packages=(
  cmake ninja-build g++ python3 make
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  nlohmann-json3-dev libfmt-dev libgtest-dev
  openmpi-bin libopenmpi-dev libopenblas-dev libdlpack-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
