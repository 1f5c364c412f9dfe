#!/usr/bin/env bash
# `make fuzz`: builds the fuzz targets (test/fuzz) as libFuzzer targets with
# clang-22, AddressSanitizer and UndefinedBehaviorSanitizer, in BUILD, and
# runs each for SECONDS (default 60) from its seeds (test/fuzz/seeds/<t>),
# the corpus it grows kept in BUILD/fuzz-corpus/<t>. Exits non-zero on the
# first target that crashes, leaks or trips a sanitizer (libFuzzer writes
# the input as BUILD/fuzz-artifacts/<t>/crash-*).
#   bash scripts/fuzz.sh [BUILD] [SECONDS] [TARGET...]
#   FUZZ_OPTIONAL=1: when clang-22 cannot be installed, say so and exit 0
#   (make test: its other tests still count).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-fuzz}
seconds=${2:-60}
shift $(( $# > 2 ? 2 : $# ))
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(graph hf plan-ir create)

if ! WHO=fuzz bash scripts/apt-install.sh clang-22 libclang-rt-22-dev; then
  if [ "${FUZZ_OPTIONAL:-0}" = 1 ]; then
    echo "fuzz: SKIPPED: clang-22 and libclang-rt-22-dev could not be installed; the fuzz targets did not run"
    exit 0
  fi
  echo "fuzz: clang-22 and libclang-rt-22-dev could not be installed" >&2
  exit 1
fi

if [ ! -f "$build/build.ninja" ]; then
  CC=clang-22 CXX=clang++-22 cmake -S . -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMFSDP_FUZZ=ON -DMFSDP_CUDA=OFF \
    -DPython_EXECUTABLE="$(command -v python3)"
fi
cmake --build "$build" -j "${JOBS:-2}" --target $(printf 'mfsdp-fuzz-%s ' "${targets[@]}")

# allow_user_poisoning=0: the prebuilt MLIR libraries are not instrumented,
# while LLVM's allocators poison memory from inline code compiled here.
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:allow_user_poisoning=0
# Leaks are checked after every input (libFuzzer's -detect_leaks); not at
# exit, where what OpenMPI's unloaded components still hold has no module
# name a suppression could match.
export LSAN_OPTIONS="suppressions=$PWD/test/fuzz/lsan.supp:print_suppressions=0:leak_check_at_exit=0"
export UBSAN_OPTIONS=print_stacktrace=1
for t in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$t"
  artifacts="$build/fuzz-artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  echo "fuzz: mfsdp-fuzz-$t for ${seconds} s"
  log="$build/fuzz-$t.log"
  if ! "$build/bin/mfsdp-fuzz-$t" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts" \
      "$corpus" "test/fuzz/seeds/$t" > "$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: mfsdp-fuzz-$t failed; the input is in $artifacts, the log $log"
    exit 1
  fi
  grep -E "^(#[0-9]+ +DONE|Done|stat::number_of_executed_units|stat::peak_rss_mb)" "$log" || true
done
echo "fuzz: every target ran ${seconds} s with no crash"
