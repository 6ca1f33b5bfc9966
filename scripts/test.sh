#!/usr/bin/env bash
# Builds hf2q with AddressSanitizer + UndefinedBehaviorSanitizer and runs every test.
# CUDA code is compiled when nvcc is present; GPU tests report SKIPPED without a GPU.
# When clang is available, the libFuzzer targets are built and run for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

jobs=$(nproc)
build=${HF2Q_TEST_BUILD_DIR:-build-test}

if command -v clang++ >/dev/null 2>&1; then
  echo "== fuzz targets (clang, libFuzzer) =="
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DHF2Q_CUDA=OFF \
    -DHF2Q_TESTS=OFF -DHF2Q_FUZZ=ON >/dev/null
  cmake --build build-fuzz -j"$jobs" --target hf2q_fuzzers
  bash scripts/run_fuzzers.sh build-fuzz
fi

echo "== build (ASan + UBSan) =="
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHF2Q_SANITIZE=ON
cmake --build "$build" -j"$jobs"

echo "== tests =="
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$build" --output-on-failure -j"$jobs"
