#!/usr/bin/env bash
# Prepared in session 45 (no device time left): the experts' Q4_K GEMV with 8 warps a block
# (HF2Q_GEMV_MMA_Q4K_WARPS=8; with 64 registers, 4 blocks an SM, and with 80, 3 blocks:
# HF2Q_GEMV_MMA_Q4K_MIN_BLOCKS=3) against main built in the same call: the grouped GEMV tests on
# both variants first (a variant that fails is not benched), DISABLED_MoeThroughput's gate_up and
# geglu rows at 8, 64 and 512 tokens, then the 64-sequence rows (f16 and int8, alternating, twice)
# and the 32-sequence f16 row. out/s46b.sh then runs the suites on the same warm machine.
#   mkdir -p $OUT && OUT=$OUT bash out/s46a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-gpu "" hf2q test_cuda_ops &
variant build-w8 "-DHF2Q_GEMV_MMA_Q4K_WARPS=8" hf2q test_cuda_ops &
variant build-w8b3 "-DHF2Q_GEMV_MMA_Q4K_WARPS=8 -DHF2Q_GEMV_MMA_Q4K_MIN_BLOCKS=3" hf2q test_cuda_ops &
wait
el built
( build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
ok=()
for d in build-w8 build-w8b3; do
  passes grouped-${d#build-} 60 $d/bin/test_cuda_ops --gtest_filter='*Grouped*:*Moe*:-*DISABLED*' && ok+=($d)
done
echo "benched: build-gpu ${ok[*]}"
for d in build-gpu "${ok[@]}"; do
  timeout 90 $d/bin/test_cuda_ops --gtest_also_run_disabled_tests --gtest_filter='CudaOps.DISABLED_MoeThroughput' \
    2>&1 | grep -E "moe (gate_up|geglu) +T= +(8|64|512) " | sed "s/^/$d /"
done | tee $OUT/perf.txt
wait
el perf
{ for i in 1 2; do
    for d in build-gpu "${ok[@]}"; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096; done
    for d in build-gpu "${ok[@]}"; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8; done
  done
  for d in build-gpu "${ok[@]}"; do b $d -p '' -n 32 -b 32 -d 1024 -r 2 -ub 4096; done
} 2>&1 | tee $OUT/bench.txt
el done
