#!/usr/bin/env bash
# Session 43, call 2: main as landed (P·V on tensor cores for the 8-bit caches, top-k's floor)
# on the GPU: the attention, sampling and model suites, the sanitizers on the new paths, and
# the 64-sequence rows (f16, int8, top-k 64) of main alone (session 42 compared them with
# 98fe83f on an H100).
#   mkdir -p $OUT && OUT=$OUT bash out/s43b.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ]; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
B=build-gpu/bin
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /tmp/cfg.log 2>&1
cmake --build build-gpu -j16 --target hf2q test_cuda_attention test_cuda_sampling test_model > /tmp/build.log 2>&1 ||
  { grep -B2 -A14 "error" /tmp/build.log | head -80; exit 1; }
el "built"
( $B/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf > /tmp/synth.log 2>&1
  echo "synth rc=$?" ) &
t() {  # t NAME TIMEOUT BIN ARGS...: a test binary, its verdict lines
  local name=$1 to=$2; shift 2
  timeout $to "$@" > $OUT/$name.log 2>&1; echo "$name rc=$?"
  grep -E "^\[  FAILED|PASSED|Failure|SKIPPED \]" $OUT/$name.log | head -10
}
t attention 200 $B/test_cuda_attention
t sampling 150 $B/test_cuda_sampling
wait
el "tested, model made"
b() {  # b ARGS...: one bench line (the tokens/s columns)
  echo "$* :: $(timeout 150 $B/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 |
    grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
}
{ b -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8
  b -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096
  b -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --top-k 64
} 2>&1 | tee $OUT/bench.txt
el bench
for tool in memcheck racecheck; do
  before 470 || break
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $B/test_cuda_attention \
    --gtest_filter='Cache/CudaAttentionKv.DecodeEveryHeadGroup/i8:Cache/CudaAttentionKv.ManySequencesDecode/*' \
    > /tmp/$tool-att.log 2>&1; echo "$tool attention rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/$tool-att.log | tail -1
done 2>&1 | tee $OUT/sanitizers.log
before 520 && t model 70 $B/test_model --gtest_filter='*DecodeArgmax*:*Graph*:*Batching*:*Int8*:*Fp8*'
el done
