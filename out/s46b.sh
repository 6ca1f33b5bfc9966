#!/usr/bin/env bash
# After out/s46a.sh on the same warm machine: the CUDA ops suite on the 8-warp Q4_K build, the
# sanitizers on its grouped GEMV tests, the model's decode and batching tests, and tg128 against
# main (one sequence also takes the grouped kernels at 8 routed rows).
#   mkdir -p $OUT && OUT=$OUT bash out/s46b.sh [build-w8|build-w8b3]
cd "$(dirname "$0")/.."
source out/device_lib.sh
d=${1:-build-w8}
more $d test_cuda_ops test_model || exit 1
el built
t ops 120 $d/bin/test_cuda_ops
sanitize 300 100 $d/bin/test_cuda_ops 'CudaOps.GroupedIntegerGemvPassBoundaries:CudaOps.GroupedIntegerGemvExactOnItsGrid' 2>&1 |
  tee $OUT/sanitizers.log
before 400 && t model 90 $d/bin/test_model --gtest_filter='*DecodeArgmax*:*Batching*:*Cuda*'
before 480 && { for i in 1 2; do for x in build-gpu $d; do b $x -p '' -n 128 -b 1 -r 2; done; done; } 2>&1 |
  tee $OUT/bench.txt
el done
