#!/usr/bin/env bash
# Installs what the build and the tests need, and nothing when it is all there.
# Idempotent; runs `apt-get update` at most once per call, and only when a
# package is missing; installs PyTorch (for the exporter in tools/export/ and
# its tests only) only when `python3 -c "import torch"` fails.
set -euo pipefail

packages=(
  cmake ninja-build g++ python3 python3-pip python3-dev make
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  nlohmann-json3-dev libfmt-dev libgtest-dev libmimalloc-dev
  openmpi-bin libopenmpi-dev libopenblas-dev libdlpack-dev libgloo-dev
)

WHO=setup bash "$(dirname "$0")/apt-install.sh" "${packages[@]}"

# Python packages, for the `python3` on PATH (the interpreter the build and the
# tests run): PyTorch 2.4 or newer (the exporter in tools/export/, the `mfsdp`
# package and their tests; the compiler and the runtime never use it), nanobind
# (the package's extension, python/src/), transformers (the package's parity
# tests: real models). Installed into it directly when it is a virtualenv or a
# Python of its own (pyenv, conda), per user when Debian manages it (PEP 668).
# From PyPI, through pip's configured index; nothing when all are there.
torch_ok='import sys, torch; sys.exit(tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 4))'
want=()
python3 -c "$torch_ok" >/dev/null 2>&1 || want+=(torch numpy)
python3 -c 'import nanobind' >/dev/null 2>&1 || want+=(nanobind)
python3 -c 'import transformers' >/dev/null 2>&1 || want+=(transformers)
if [ ${#want[@]} -ne 0 ]; then
  pip_args=(-m pip install --upgrade --disable-pip-version-check -q)
  if python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)'; then
    :  # a virtualenv
  elif [ -e "$(python3 -c 'import sysconfig; print(sysconfig.get_path("stdlib"))')/EXTERNALLY-MANAGED" ]; then
    pip_args+=(--user --break-system-packages)
  fi
  echo "setup: installing ${want[*]} for $(command -v python3)"
  python3 "${pip_args[@]}" "${want[@]}"
  python3 -c "$torch_ok" || { echo "setup: torch 2.4 or newer does not import after installing it" >&2; exit 1; }
  python3 -c 'import nanobind, transformers' || { echo "setup: nanobind or transformers does not import after installing them" >&2; exit 1; }
fi
