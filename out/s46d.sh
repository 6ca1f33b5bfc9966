#!/usr/bin/env bash
# After out/s46c.sh on the same warm machine: the sanitizers on the promise test and the many-
# sequence decode (8-bit pools) with the warp kernel's early fetch, and the model's decode tests
# (their steps store the key at pos just before attention reads it).
#   mkdir -p $OUT && OUT=$OUT bash out/s46d.sh [build-fe|build-fe4]
cd "$(dirname "$0")/.."
source out/device_lib.sh
d=${1:-build-fe}
cmake --build $d -j16 --target test_cuda_attention test_model > /tmp/build-$d.log 2>&1 ||
  { grep -B2 -A14 "error" /tmp/build-$d.log | head -60; exit 1; }
el built
for tool in memcheck racecheck; do
  before 300 || break
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 1 $d/bin/test_cuda_attention \
    --gtest_filter='Cache/CudaAttentionKv.DecodeWithEarlierKeysStored/i8:Cache/CudaAttentionKv.ManySequencesDecode/e4m3' \
    > /tmp/$tool.log 2>&1; echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/$tool.log | tail -1
done 2>&1 | tee $OUT/sanitizers.log
before 420 && t model 120 $d/bin/test_model --gtest_filter='*Int8*:*E4m3*:*DecodeArgmax*:*Batching*:*Cuda*'
el done
