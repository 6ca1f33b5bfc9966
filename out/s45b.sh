#!/usr/bin/env bash
# After out/s45a.sh on the same warm machine: the attention suite with keys by warp (two stages and
# three), the sanitizers on its i8 decode tests, and the model's int8 and decode tests with it.
#   mkdir -p $OUT && OUT=$OUT bash out/s45b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
cmake --build build-wk2 -j16 --target test_cuda_attention test_model > /tmp/build-wk2.log 2>&1 ||
  { grep -B2 -A14 "error" /tmp/build-wk2.log | head -60; exit 1; }
el built
t attention-wk2 200 build-wk2/bin/test_cuda_attention
t attention-wk3 90 build-wk3/bin/test_cuda_attention --gtest_filter='Cache/*/i8:-*DISABLED*'
for tool in memcheck racecheck; do
  before 420 || break
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 build-wk2/bin/test_cuda_attention \
    --gtest_filter='Cache/CudaAttentionKv.DecodeEveryHeadGroup/i8:Cache/CudaAttentionKv.ManySequencesDecode/i8' \
    > /tmp/$tool.log 2>&1; echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/$tool.log | tail -1
done 2>&1 | tee $OUT/sanitizers.log
before 500 && t model 90 build-wk2/bin/test_model --gtest_filter='*Int8*:*DecodeArgmax*:*Batching*'
el done
