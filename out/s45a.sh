#!/usr/bin/env bash
# Next session's first A/B (prepared in session 44): keys by warp in the i8 split decode kernel
# (HF2Q_SPLIT_WARP_KEYS=1) with two stages a warp and with three (HF2Q_SPLIT_WARP_STAGES=3), against
# main built in the same call: DISABLED_Perf's i8 decode rows, then the int8 rows at 64 and 32
# sequences (alternating) and int8 tg128. out/s45b.sh then runs the suites on the same warm machine.
#   mkdir -p $OUT && OUT=$OUT bash out/s45a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-gpu "" hf2q test_cuda_attention &
variant build-wk2 "-DHF2Q_SPLIT_WARP_KEYS=1" hf2q test_cuda_attention &
variant build-wk3 "-DHF2Q_SPLIT_WARP_KEYS=1 -DHF2Q_SPLIT_WARP_STAGES=3" hf2q test_cuda_attention &
wait
el built
( build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
for d in build-gpu build-wk2 build-wk3; do
  timeout 40 $d/bin/test_cuda_attention --gtest_also_run_disabled_tests \
    --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/i8" 2>&1 | grep -E "decode (64|1 seq @(300|32768), D=256)" |
    sed "s/^/$d /"
done | tee $OUT/perf.txt
wait
el perf
{ for i in 1 2; do
    for d in build-gpu build-wk2 build-wk3; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8; done
  done
  for d in build-gpu build-wk2 build-wk3; do b $d -p '' -n 32 -b 32 -d 1024 -r 2 -ub 4096 --cache-type int8; done
  for d in build-gpu build-wk2; do b $d -p '' -n 128 -b 1 -r 2 --cache-type int8; done
} 2>&1 | tee $OUT/bench.txt
el done
