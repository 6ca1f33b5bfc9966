#!/usr/bin/env bash
# Session 43: the i8 pools' scores on the integer tensor cores (HF2Q_SPLIT_I8_IMMA, on in this
# tree) against the same tree with it off: the attention suite, DISABLED_Perf's i8 rows, the
# 64-sequence int8 row (alternating), test_model's int8 parity, then ncu and memcheck as time allows.
#   mkdir -p $OUT && OUT=$OUT bash out/s43c.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ]; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
build() {  # build DIR CUDA_FLAGS TARGETS...
  local d=$1 f=$2; shift 2
  ( cmake -S . -B $d -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON "-DCMAKE_CUDA_FLAGS=$f" > /tmp/cfg-$d.log 2>&1 &&
    cmake --build $d -j16 --target "$@" > /tmp/build-$d.log 2>&1; echo "$d rc=$?"
    grep -B2 -A10 " error" /tmp/build-$d.log | head -40 )
}
build build-off "-DHF2Q_SPLIT_I8_IMMA=0" hf2q test_cuda_attention &
build build-gpu "" hf2q test_cuda_attention test_model &
wait
el built
( build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
for d in build-off build-gpu; do
  timeout 60 $d/bin/test_cuda_attention --gtest_also_run_disabled_tests --gtest_filter='Cache/CudaAttentionKv.DISABLED_Perf/i8' \
    2>&1 | grep -E "decode" | grep -v generic | sed "s/^/$d /"
done | tee $OUT/perf.txt
t() {  # t NAME TIMEOUT BIN ARGS...: a test binary, its verdict lines
  local name=$1 to=$2; shift 2
  timeout $to "$@" > $OUT/$name.log 2>&1; echo "$name rc=$?"
  grep -E "^\[  FAILED|PASSED|Failure|SKIPPED \]|max rel err" $OUT/$name.log | head -16
}
t attention 150 build-gpu/bin/test_cuda_attention --gtest_filter='Cache/*:-*DISABLED*'
wait
el "tested"
b() {  # b DIR ARGS...: one bench line (the tokens/s columns)
  local d=$1; shift
  echo "$d $* :: $(timeout 100 $d/bin/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 |
    grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
}
{ for i in 1 2; do
    for d in build-off build-gpu; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8; done
  done
} 2>&1 | tee $OUT/bench.txt
el bench
before 450 && t model 60 build-gpu/bin/test_model --gtest_filter='*Int8*:*DecodeArgmax*'
if before 500 && command -v ncu > /dev/null; then
  for d in build-off build-gpu; do
    timeout 40 ncu --section SpeedOfLight --section WarpStateStats --section LaunchStats --kernel-name-base demangled \
      --kernel-name 'regex:attention_split_kernel.*256' --launch-skip 10 --launch-count 1 $d/bin/test_cuda_attention \
      --gtest_also_run_disabled_tests --gtest_filter='Cache/CudaAttentionKv.DISABLED_Perf/i8' > $OUT/ncu-$d.txt 2>&1
    echo "ncu $d rc=$?"
    grep -E "  Duration|DRAM Throughput|Compute \(SM\) Throughput|Warp Cycles Per Issued|Registers Per" $OUT/ncu-$d.txt | head -8
  done
fi
if before 540; then
  timeout 50 compute-sanitizer --tool memcheck --error-exitcode 1 build-gpu/bin/test_cuda_attention \
    --gtest_filter='Cache/CudaAttentionKv.DecodeQueryScales/i8' > /tmp/memcheck.log 2>&1
  echo "memcheck rc=$?"; grep "ERROR SUMMARY" /tmp/memcheck.log
fi
el done
