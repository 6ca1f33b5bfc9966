#!/usr/bin/env bash
# Session 45, third A/B: keys by warp for the E4M3 (fp8) pools too, against HF2Q_SPLIT_WARP_KEYS=0
# built in the same call: DISABLED_Perf's e4m3 decode rows, then fp8 decode steps at 64 sequences
# (alternating, twice), 32 and 8 at 1,024 keys, fp8 tg128, and the int8 64-sequence row once more.
# out/s45f.sh then runs the suites on the same warm machine.
#   mkdir -p $OUT && OUT=$OUT bash out/s45e.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-base "-DHF2Q_SPLIT_WARP_KEYS=0" hf2q test_cuda_attention &
variant build-gpu "" hf2q test_cuda_attention test_model test_cuda_ops &
wait
el built
( build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
for d in build-base build-gpu; do
  timeout 40 $d/bin/test_cuda_attention --gtest_also_run_disabled_tests \
    --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/e4m3" 2>&1 |
    grep -E "decode (64|1 seq @(300|32768), D=256)" | sed "s/^/$d /"
done | tee $OUT/perf.txt
wait
el perf
{ for i in 1 2; do
    for d in build-base build-gpu; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type fp8; done
  done
  for n in 32 8; do
    for d in build-base build-gpu; do b $d -p '' -n 32 -b $n -d 1024 -r 2 -ub 4096 --cache-type fp8; done
  done
  for d in build-base build-gpu; do b $d -p '' -n 128 -b 1 -r 2 --cache-type fp8; done
  for d in build-base build-gpu; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8; done
} 2>&1 | tee $OUT/bench.txt
el done
