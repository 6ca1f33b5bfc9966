#!/usr/bin/env bash
# Session 49, after out/s49a.sh (whose knock-outs put the warp kernel at 78 us with its KV in L2,
# 69 without its arithmetic, against 103 us from DRAM, H100): what sets that floor. Knock-outs
# (out/knock.patch) of DISABLED_Perf/i8's 64-sequence case: L2 as token 0's blocks (16) or as 8
# tokens' (64: no single hot set), the tile copies without the source-size operand (32: session 46
# saw the zero-fill form ask L2 for 24 sectors where 16 do), no row-scale loads (128); then ncu's
# speed of light for 0, 16 and 48. On an H200, out/pipe_probe.cu first (seconds). About 4 minutes.
#   mkdir -p $OUT && OUT=$OUT bash out/s49b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 &&
  nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/pipe_probe out/pipe_probe.cu && /tmp/pipe_probe | tee $OUT/pipe.txt
variant build-gpu "" test_cuda_attention &
knock_tree test_cuda_attention &
wait
el built
{ knock_perf main build-gpu/bin/test_cuda_attention
  for k in 16 64 48 32 144 128 51 19 3 0; do
    HF2Q_KNOCK=$k knock_perf knock$k /tmp/ktree/build-k/bin/test_cuda_attention
  done
  knock_perf main2 build-gpu/bin/test_cuda_attention
} 2>&1 | tee $OUT/knock.txt
el knocked
for k in 0 16 48; do
  HF2Q_KNOCK=$k timeout 100 ncu --section SpeedOfLight --section SourceCounters --kernel-name-base demangled \
    --kernel-name 'regex:attention_split_warps_kernel.*256' --launch-skip 20 --launch-count 1 \
    /tmp/ktree/build-k/bin/test_cuda_attention --gtest_also_run_disabled_tests \
    --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/i8" > /tmp/ncu-k$k.txt 2>&1
  echo "ncu knock$k rc=$?"
  grep -E "  Duration|DRAM Throughput|L2 Cache Throughput|excessive sectors" /tmp/ncu-k$k.txt | head -6
done
el done
