#!/usr/bin/env bash
# Session 44, call 6: why the split decode attention kernel issues so little with the i8 cache
# (s43a: 1.56 instructions a cycle an SM, 12 warps an SM, 60 % of cycles with no eligible warp):
# the warps' stall reasons, per issued instruction, on the 64-sequence sliding-layer case (head
# size 256) for i8 and f16, main as is.
#   mkdir -p $OUT && OUT=$OUT bash out/s44e.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
B=build-gpu/bin
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /tmp/cfg.log 2>&1
cmake --build build-gpu -j16 --target test_cuda_attention > /tmp/build.log 2>&1 ||
  { grep -B2 -A14 "error" /tmp/build.log | head -80; exit 1; }
el built
for kv in i8 f16; do
  timeout 120 ncu --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    --kernel-name-base demangled --kernel-name 'regex:attention_split_kernel.*256' \
    --launch-skip 20 --launch-count 1 $B/test_cuda_attention --gtest_also_run_disabled_tests \
    --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/$kv" > $OUT/stall-$kv.txt 2>&1
  echo "ncu $kv rc=$?"
  grep -E "attention_split_kernel" $OUT/stall-$kv.txt | head -1 | cut -c1-100
  grep -E "stalled" $OUT/stall-$kv.txt | awk '$NF+0 >= 0.05' | sort -k3 -g -r | head -12
done
el done
