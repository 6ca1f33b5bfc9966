#!/usr/bin/env bash
# Prepared in session 45: where the keys-by-warp decode kernel (on by default since 3f0f299) spends
# its time, as s43a.sh / s44e.sh profiled the chunk kernel: ncu's full set on one launch of the
# 64-sequence sliding-layer case (head size 256, 1,024 keys) with the i8 and e4m3 pools, then the
# warps' stall reasons (cycles per issued instruction) for i8. The launch: DISABLED_Perf's first
# case (prefill, head size 256) runs the split kernel 11 times, all tokens handled by the tile
# kernel (quick skips; the plan picks the warp kernel there too), so the 21st launch of the warp
# kernel is the 64-sequence decode case's 10th.
#   mkdir -p $OUT && OUT=$OUT bash out/s46e.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
B=build-gpu/bin
variant build-gpu "" test_cuda_attention
[ -x $B/test_cuda_attention ] || exit 1
el built
K='regex:attention_split_warps_kernel.*256'
for kv in i8 e4m3; do
  timeout 150 ncu --set full --kernel-name-base demangled --kernel-name "$K" \
    --launch-skip 20 --launch-count 1 $B/test_cuda_attention --gtest_also_run_disabled_tests \
    --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/$kv" > $OUT/ncu-$kv.txt 2>&1
  echo "ncu $kv rc=$?"
  grep -E "attention_split_warps_kernel|  Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Achieved Occupancy|Theoretical Occupancy|Registers Per|Dynamic Shared|No Eligible|Executed Instructions  |Grid Size" $OUT/ncu-$kv.txt | head -20
done
timeout 120 ncu --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
  --kernel-name-base demangled --kernel-name "$K" --launch-skip 20 --launch-count 1 $B/test_cuda_attention \
  --gtest_also_run_disabled_tests --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/i8" > $OUT/stall-i8.txt 2>&1
echo "ncu stalls rc=$?"
grep -E "stalled" $OUT/stall-i8.txt | awk '$NF+0 >= 0.05' | sort -k3 -g -r | head -12
el done
