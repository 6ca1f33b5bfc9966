#!/usr/bin/env bash
# After out/s46a.sh on the same warm machine: the CUDA ops suite on the 8-warp Q4_K build, the
# sanitizers on its grouped GEMV tests, the model's decode and batching tests, and tg128 against
# main (one sequence also takes the grouped kernels at 8 routed rows).
#   mkdir -p $OUT && OUT=$OUT bash out/s46b.sh [build-w8|build-w8b3]
cd "$(dirname "$0")/.."
source out/device_lib.sh
d=${1:-build-w8}
cmake --build $d -j16 --target test_cuda_ops test_model > /tmp/build-$d.log 2>&1 ||
  { grep -B2 -A14 "error" /tmp/build-$d.log | head -60; exit 1; }
el built
t ops 120 $d/bin/test_cuda_ops
for tool in memcheck racecheck; do
  before 300 || break
  timeout 100 compute-sanitizer --tool $tool --error-exitcode 1 $d/bin/test_cuda_ops \
    --gtest_filter='CudaOps.GroupedIntegerGemvPassBoundaries:CudaOps.GroupedIntegerGemvExactOnItsGrid' \
    > /tmp/$tool.log 2>&1; echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/$tool.log | tail -1
done 2>&1 | tee $OUT/sanitizers.log
before 400 && t model 90 $d/bin/test_model --gtest_filter='*DecodeArgmax*:*Batching*:*Cuda*'
before 480 && { for i in 1 2; do for x in build-gpu $d; do b $x -p '' -n 128 -b 1 -r 2; done; done; } 2>&1 |
  tee $OUT/bench.txt
el done
