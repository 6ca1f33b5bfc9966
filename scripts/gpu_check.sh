#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (the H200 of docs/performance.md): builds Release
# with CUDA (sm_90a), runs the CUDA op tests and the model parity tests on CPU and
# GPU, runs the CUDA op tests under compute-sanitizer (memcheck, racecheck), then
# the benchmarks given in HF2Q_BENCH_ARGS against the model in HF2Q_BENCH_MODEL.
# Logs go to $OUT (or out/gpu); the last lines printed are a summary.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu}
mkdir -p "$out"
jobs=$(nproc)
summary=()
step() {  # step NAME COMMAND...: runs, logs, records PASS/FAIL
  local name=$1; shift
  local t0=$(date +%s)
  if "$@" >"$out/$name.log" 2>&1; then summary+=("PASS $name ($(( $(date +%s) - t0 ))s)")
  else summary+=("FAIL $name ($(( $(date +%s) - t0 ))s): see $name.log"); tail -30 "$out/$name.log"; fi
}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv >"$out/gpu.txt" 2>&1
step configure cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON
step build_tests cmake --build build-gpu -j"$jobs" --target test_cuda_ops test_model
step build_cli cmake --build build-gpu -j"$jobs" --target hf2q
step cuda_ops ./build-gpu/bin/test_cuda_ops
step model ./build-gpu/bin/test_model
if command -v compute-sanitizer >/dev/null; then
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 ./build-gpu/bin/test_cuda_ops
  step racecheck compute-sanitizer --tool racecheck --error-exitcode 1 ./build-gpu/bin/test_cuda_ops
  step memcheck_model compute-sanitizer --tool memcheck --error-exitcode 1 ./build-gpu/bin/test_model --gtest_filter='*Cuda*'
fi
if [ -n "${HF2Q_SYNTH_ARGS:-}" ]; then
  step synth bash -c "/usr/bin/time -v ./build-gpu/bin/hf2q synth $HF2Q_SYNTH_ARGS"
fi
if [ -n "${HF2Q_BENCH_MODEL:-}" ]; then
  step bench ./build-gpu/bin/hf2q bench -m "$HF2Q_BENCH_MODEL" --backend cuda ${HF2Q_BENCH_ARGS:-}
  cat "$out/bench.log"
fi
grep -h "parity \]" "$out/model.log" 2>/dev/null
printf '%s\n' "${summary[@]}"
