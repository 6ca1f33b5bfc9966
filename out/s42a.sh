#!/usr/bin/env bash
# Session 42, one device call: main (out/ab-base.tgz from scripts/ab_base.sh main; carry it)
# beside this tree: P·V of the split attention kernel on tensor cores (HF2Q_SPLIT_MMA_PV), the
# dense products of 17-64 tokens from the block formats (HF2Q_SMALL_GEMM, gemm_small.cu) and
# top-k's floor (HF2Q_TOPK_FLOOR). Steps in order of need, each skipped past its time mark;
# builds stay in build-base/ and build-gpu/ (ignored) for a next call on a warm machine.
#   mkdir -p $OUT && OUT=$OUT bash out/s42a.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ]; }  # before SECONDS: time is left for a step
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
git log --oneline -1
B=build-gpu/bin
A=build-base/build/bin
if [ ! -x $A/test_cuda_sampling ]; then
  mkdir -p build-base && tar -xzf out/ab-base.tgz -C build-base
  ( cmake -S build-base -B build-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /tmp/cfg-base.log 2>&1 &&
    cmake --build build-base/build -j16 --target hf2q test_cuda_sampling > /tmp/build-base.log 2>&1
    echo "base build rc=$?" ) &
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /tmp/cfg.log 2>&1
cmake --build build-gpu -j16 --target hf2q test_cuda_ops test_cuda_attention test_cuda_sampling test_model \
  > /tmp/build.log 2>&1 || { grep -B2 -A14 "error" /tmp/build.log | head -80; exit 1; }
el "branch built"
[ -f /tmp/g26.gguf ] || ( $B/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force \
    -o /tmp/g26.gguf > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
t() {  # t NAME TIMEOUT BIN ARGS...: a test binary, its verdict lines
  local name=$1 to=$2; shift 2
  timeout $to "$@" > $OUT/$name.log 2>&1; echo "$name rc=$?"
  grep -E "^\[  FAILED|PASSED|Failure|SKIPPED \]" $OUT/$name.log | head -10
}
t ops 150 $B/test_cuda_ops --gtest_filter='*SmallBatch*:*DenseBatch*:*Bf16Rows*:*DecodeLayout*:*Matmul*'
t attention 200 $B/test_cuda_attention
t sampling 150 $B/test_cuda_sampling
wait
el "tested; base built, model made"
b() {  # b BIN ARGS...: one bench line (the tokens/s columns)
  local bin=$1; shift
  echo "${bin%%/*} $* :: $(timeout 150 $bin/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 |
    grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
}
{ for i in 1 2; do
    b $A -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096; b $B -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096
  done
  b $A -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8
  b $B -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8
  b $A -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --top-k 64
  b $B -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --top-k 64
} 2>&1 | tee $OUT/bench.txt
el bench
if before 420; then
  for tool in memcheck racecheck; do
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $B/test_cuda_ops \
      --gtest_filter='*SmallBatchMatmulSmallShapes*' > /tmp/$tool-ops.log 2>&1; echo "$tool ops rc=$?"; tail -1 /tmp/$tool-ops.log
    timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $B/test_cuda_attention \
      --gtest_filter='*DecodeEveryHeadGroup*:*SingleTokenBatch*' > /tmp/$tool-att.log 2>&1
    echo "$tool attention rc=$?"; tail -1 /tmp/$tool-att.log
    timeout 60 compute-sanitizer --tool $tool --error-exitcode 1 $B/test_cuda_sampling \
      --gtest_filter='*TopkRowsGrid*' > /tmp/$tool-smp.log 2>&1; echo "$tool sampling rc=$?"; tail -1 /tmp/$tool-smp.log
  done 2>&1 | tee $OUT/sanitizers.log
  el sanitized
fi
before 480 && t model 100 $B/test_model --gtest_filter='*DecodeArgmax*:*Graph*:*Batching*'
if before 520; then
  for bin in $A $B; do
    echo "== ${bin%%/*}"; timeout 30 $bin/test_cuda_sampling --gtest_also_run_disabled_tests \
      --gtest_filter='*DISABLED_Perf' | grep "perf.*topk"
  done 2>&1 | tee $OUT/perf.txt
fi
if before 540; then
  { b $A -p '' -n 32 -b 32 -d 1024 -r 2 -ub 4096; b $B -p '' -n 32 -b 32 -d 1024 -r 2 -ub 4096; } 2>&1 | tee -a $OUT/bench.txt
fi
el done
