#!/usr/bin/env bash
# Prepared in session 46 (device time spent): the keys-by-warp kernel reading each tile's block-table
# entries an iteration ahead (HF2Q_SPLIT_WARP_LOOKUP_AHEAD=1; ncu put 15 % of its stalls on that
# load's first use) against main built in the same call: the 8-bit attention tests and the
# sanitizers on the variant, ncu's duration for both (DISABLED_Perf's 64-sequence i8 case), then the
# 64-sequence int8/fp8 rows alternating twice and 8 sequences. Land it only if it wins here.
#   mkdir -p $OUT && OUT=$OUT bash out/s47a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
# The pool-layout probe first (seconds): whether 256-byte runs bind the 8-bit kernels' reads.
nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/pool_probe out/pool_probe.cu && /tmp/pool_probe | tee $OUT/probe.txt
variant build-gpu "" hf2q test_cuda_attention &
variant build-la "-DHF2Q_SPLIT_WARP_LOOKUP_AHEAD=1" hf2q test_cuda_attention &
wait
el built
( build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
ok=()
passes attention-la 150 build-la/bin/test_cuda_attention \
  --gtest_filter='Cache/*/i8:Cache/*/e4m3:*SplitPlan*:-*DISABLED*' && ok+=(build-la)
sanitize 250 100 build-la/bin/test_cuda_attention \
  'Cache/CudaAttentionKv.DecodeWithEarlierKeysStored/i8:Cache/CudaAttentionKv.ManySequencesDecode/e4m3' 2>&1 |
  tee $OUT/sanitizers.log
K='regex:attention_split_warps_kernel.*256'
for d in build-gpu build-la; do
  timeout 100 ncu --section SpeedOfLight --section SourceCounters --kernel-name-base demangled --kernel-name "$K" \
    --launch-skip 20 --launch-count 1 $d/bin/test_cuda_attention --gtest_also_run_disabled_tests \
    --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/i8" > $OUT/ncu-$d.txt 2>&1
  echo "ncu $d rc=$?"; grep -E "  Duration|DRAM Throughput|excessive sectors|excessive wavefronts" -A1 $OUT/ncu-$d.txt | head -12
done
echo "benched: build-gpu ${ok[*]}"
wait
el tested
{ for i in 1 2; do
    for c in int8 fp8; do
      for d in build-gpu "${ok[@]}"; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type $c; done
    done
  done
  for d in build-gpu "${ok[@]}"; do b $d -p '' -n 32 -b 8 -d 1024 -r 2 -ub 4096 --cache-type int8; done
} 2>&1 | tee $OUT/bench.txt
el done
