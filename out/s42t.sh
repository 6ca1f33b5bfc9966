#!/usr/bin/env bash
# Session 42, call 1: topk_rows with a floor (HF2Q_TOPK_FLOOR, this tree) against main
# (out/ab-base.tgz from scripts/ab_base.sh main; carry it). Builds stay in build-base/ and
# build-gpu/ for out/s42a.sh on a still-warm machine.
#   mkdir -p $OUT && OUT=$OUT bash out/s42t.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
git log --oneline -1
B=build-gpu/bin
A=build-base/build/bin
mkdir -p build-base && tar -xzf out/ab-base.tgz -C build-base
( cmake -S build-base -B build-base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /tmp/cfg-base.log 2>&1 &&
  cmake --build build-base/build -j16 --target hf2q test_cuda_sampling > /tmp/build-base.log 2>&1; echo "base build rc=$?" ) &
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /tmp/cfg.log 2>&1
cmake --build build-gpu -j16 --target hf2q test_cuda_sampling test_model > /tmp/build.log 2>&1 ||
  { grep -B2 -A14 "error" /tmp/build.log | head -80; exit 1; }
el "branch built"
( $B/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf > /tmp/synth.log 2>&1
  echo "synth rc=$?" ) &
timeout 200 $B/test_cuda_sampling > $OUT/test_sampling.log 2>&1; echo "test_cuda_sampling rc=$?"
grep -E "^\[  FAILED|PASSED|Failure" $OUT/test_sampling.log | head -12
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 1 $B/test_cuda_sampling \
    --gtest_filter='*TopkRowsGrid*:*TopkRowsZero*' > /tmp/$tool.log 2>&1; echo "$tool rc=$?"; tail -2 /tmp/$tool.log
done 2>&1 | tee $OUT/sanitizers.log
wait
el "tested, base built, model made"
for bin in $A $B; do
  echo "== ${bin%%/*}"; timeout 60 $bin/test_cuda_sampling --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Perf' |
    grep perf
done 2>&1 | tee $OUT/perf.txt
timeout 200 $B/test_model --gtest_filter='*DecodeArgmax*:*Graph*:*Batching*' > $OUT/test_model.log 2>&1
echo "test_model rc=$?"; grep -E "^\[  FAILED|PASSED|SKIPPED \]" $OUT/test_model.log | head -8
el "perf, test_model"
b() {  # b BIN ARGS...: one bench line (the tokens/s columns)
  local bin=$1; shift
  echo "${bin%%/*} $* :: $(timeout 150 $bin/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 |
    grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
}
{ for i in 1 2; do
    b $A -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --top-k 64; b $B -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --top-k 64
  done
  b $A -p '' -n 128 -b 1 -r 2 --top-k 64; b $B -p '' -n 128 -b 1 -r 2 --top-k 64
  b $A -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096; b $B -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096
} 2>&1 | tee $OUT/bench.txt
el done
