#!/usr/bin/env bash
# Session 43, call 1: where the split decode attention kernel spends its time with the
# f16 and int8 caches (64 sequences at 1,024 keys, head size 256: the sliding layers of a
# 64-sequence step), DISABLED_Perf's rows for f16 / e4m3 / i8 and one ncu launch each (full set).
# The launch: DISABLED_Perf's first case (prefill, head size 256) launches the split kernel 11
# times with every token handled by the tile kernel (quick skips), so the 21st D = 256 launch
# is the 64-sequence decode case's 10th (session 43's s43c skipped 10 and caught a prefill one).
#   mkdir -p $OUT && OUT=$OUT bash out/s43a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
B=build-gpu/bin
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /tmp/cfg.log 2>&1
cmake --build build-gpu -j16 --target test_cuda_attention > /tmp/build.log 2>&1 ||
  { grep -B2 -A14 "error" /tmp/build.log | head -80; exit 1; }
el built
for kv in f16 e4m3 i8; do
  timeout 90 $B/test_cuda_attention --gtest_also_run_disabled_tests --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/$kv" \
    2>&1 | grep -E "decode 64|generic" | head -4 | sed "s/^/$kv /"
done | tee $OUT/perf.txt
el perf
if command -v ncu > /dev/null; then
  for kv in f16 i8; do
    timeout 150 ncu --set full --kernel-name-base demangled --kernel-name 'regex:attention_split_kernel.*256' \
      --launch-skip 20 --launch-count 1 $B/test_cuda_attention --gtest_also_run_disabled_tests \
      --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/$kv" > $OUT/ncu-$kv.txt 2>&1
    echo "ncu $kv rc=$?"
    grep -E "attention_split_kernel|  Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Achieved Occupancy|Theoretical Occupancy|Registers Per|Dynamic Shared|No Eligible|Executed Instructions  " $OUT/ncu-$kv.txt | head -20
  done
fi
el done
