#!/usr/bin/env bash
# Session 42, on main with the small GEMM switched on (-DHF2Q_SMALL_GEMM=1 for the CUDA files;
# wip/small-gemm, if it still exists, also gives the layers' Q6_K matrices planes, which the
# tests here do not need): the kernel's tests after the test fix,
# memcheck on its small shapes, then each dense product of the 26B-A4B at 17-64 tokens from
# the block formats against its BF16 copy on cuBLAS (DISABLED_MatmulThroughput), in one build.
#   mkdir -p $OUT && OUT=$OUT bash out/s42c.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader
B=build-gpu/bin
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON -DCMAKE_CUDA_FLAGS=-DHF2Q_SMALL_GEMM=1 \
  > /tmp/cfg.log 2>&1
cmake --build build-gpu -j16 --target test_cuda_ops > /tmp/build.log 2>&1 ||
  { grep -B2 -A14 "error" /tmp/build.log | head -80; exit 1; }
el built
timeout 60 $B/test_cuda_ops --gtest_also_run_disabled_tests \
  --gtest_filter='*DISABLED_MatmulThroughput' 2>&1 | grep -E "T=   (17|32|64) " | tee $OUT/throughput.txt
el throughput
timeout 60 $B/test_cuda_ops --gtest_filter='*SmallBatch*:*DenseBatch*:*Bf16Rows*:*DecodeLayout*' > $OUT/ops.log 2>&1
echo "ops rc=$?"; grep -E "^\[  FAILED|PASSED|Failure" $OUT/ops.log | head
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 $B/test_cuda_ops --gtest_filter='*SmallBatchMatmulSmallShapes*' \
  > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"; grep "ERROR SUMMARY" $OUT/memcheck.log
# Where a 64-token launch of the kernel waits (issue, shared memory, L2, DRAM), if ncu is there.
if command -v ncu > /dev/null; then
  timeout 120 ncu --kernel-name-base demangled --kernel-name regex:small_gemm_kernel --launch-skip 60 --launch-count 2 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy \
    $B/test_cuda_ops --gtest_filter='*SmallBatchMatmulMatchesBf16Reference*' > $OUT/ncu.txt 2>&1
  echo "ncu rc=$?"; grep -E "small_gemm_kernel|Duration|Throughput|Stall|Achieved Occupancy" $OUT/ncu.txt | head -30
fi
el done
