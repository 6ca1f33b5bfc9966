#!/usr/bin/env bash
# Session 42, call 3: what lands (top-k's floor; P·V on tensor cores for the 8-bit caches)
# against main (out/ab-base.tgz from scripts/ab_base.sh main; carry it): the attention and
# sampling suites, the 64-sequence rows (int8, f16, top-k 64), then, as time allows, the
# sanitizers on the new paths and test_model.
#   mkdir -p $OUT && OUT=$OUT bash out/s42b.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ]; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
B=build-gpu/bin
A=build-base/build/bin
if [ ! -x $A/hf2q ]; then
  mkdir -p build-base && tar -xzf out/ab-base.tgz -C build-base
  ( cmake -S build-base -B build-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /tmp/cfg-base.log 2>&1 &&
    cmake --build build-base/build -j16 --target hf2q > /tmp/build-base.log 2>&1; echo "base build rc=$?" ) &
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /tmp/cfg.log 2>&1
cmake --build build-gpu -j16 --target hf2q test_cuda_attention test_cuda_sampling test_model > /tmp/build.log 2>&1 ||
  { grep -B2 -A14 "error" /tmp/build.log | head -80; exit 1; }
el "built"
[ -f /tmp/g26.gguf ] || ( $B/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force \
    -o /tmp/g26.gguf > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
t() {  # t NAME TIMEOUT BIN ARGS...: a test binary, its verdict lines
  local name=$1 to=$2; shift 2
  timeout $to "$@" > $OUT/$name.log 2>&1; echo "$name rc=$?"
  grep -E "^\[  FAILED|PASSED|Failure|SKIPPED \]" $OUT/$name.log | head -10
}
t attention 200 $B/test_cuda_attention
t sampling 150 $B/test_cuda_sampling
wait
el "tested; base built, model made"
b() {  # b BIN ARGS...: one bench line (the tokens/s columns)
  local bin=$1; shift
  echo "${bin%%/*} $* :: $(timeout 150 $bin/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 |
    grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
}
{ b $A -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8; b $B -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8
  b $A -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096; b $B -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096
  b $A -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --top-k 64; b $B -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --top-k 64
  before 420 && { b $A -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8
                  b $B -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8; }
  before 460 && { b $A -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096; b $B -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096; }
} 2>&1 | tee $OUT/bench.txt
el bench
if before 480; then
for tool in memcheck racecheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 $B/test_cuda_attention \
    --gtest_filter='Cache/CudaAttentionKv.DecodeEveryHeadGroup/*:Cache/CudaAttentionKv.ManySequencesDecode/*' \
    > /tmp/$tool-att.log 2>&1; echo "$tool attention rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/$tool-att.log | tail -1
done 2>&1 | tee $OUT/sanitizers.log
t model 120 $B/test_model --gtest_filter='*DecodeArgmax*:*Graph*:*Batching*:*Int8*:*Fp8*:*Cache*'
fi
el done
