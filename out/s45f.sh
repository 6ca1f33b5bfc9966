#!/usr/bin/env bash
# After out/s45e.sh on the same warm machine: the attention suite with keys by warp for the E4M3
# pools too (attention_split_plan picks it), the sanitizers on its e4m3 decode tests, the CUDA ops
# suite and the model's int8, fp8, decode and batching tests.
#   mkdir -p $OUT && OUT=$OUT bash out/s45f.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
cmake --build build-gpu -j16 --target test_cuda_attention test_model test_cuda_ops > /tmp/build-gpu.log 2>&1 ||
  { grep -B2 -A14 "error" /tmp/build-gpu.log | head -60; exit 1; }
el built
t attention 200 build-gpu/bin/test_cuda_attention
grep -E "^\[ +(OK|FAILED) +\] .*SplitPlan" $OUT/attention.log
for tool in memcheck racecheck; do
  before 330 || break
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 build-gpu/bin/test_cuda_attention \
    --gtest_filter='Cache/CudaAttentionKv.DecodeEveryHeadGroup/e4m3:Cache/CudaAttentionKv.ManySequencesDecode/e4m3' \
    > /tmp/$tool.log 2>&1; echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/$tool.log | tail -1
done 2>&1 | tee $OUT/sanitizers.log
before 420 && t ops 80 build-gpu/bin/test_cuda_ops
before 500 && t model 90 build-gpu/bin/test_model --gtest_filter='*Int8*:*Fp8*:*E4m3*:*DecodeArgmax*:*Batching*'
el done
