#!/usr/bin/env bash
# Session 50: the experts' GEGLU as the grouped tensor-core GEMV's epilogue (gemv_mma.cu's kGlu,
# on by default) against the product-then-GEGLU path (-DHF2Q_GEMV_MMA_GEGLU=0), both built in
# this call. The new test and the grouped/prepared/GEGLU ones, test_model's CUDA, batching, graph
# and concurrency cases and the sanitizers on the new default; then the 64-sequence rows (f16,
# int8, fp8) alternating twice, 32 and 17 sequences, and a CUPTI trace of the int8 step (the
# GEGLU's launches: 60 -> 30). About 7 minutes on an H100.
#   mkdir -p $OUT && OUT=$OUT bash out/s50a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-gpu "" hf2q test_cuda_ops test_model hf2q_cupti_trace &
variant build-ng "-DHF2Q_GEMV_MMA_GEGLU=0" hf2q &
wait
el built
synth_g26 &
ok=()
passes ops 300 build-gpu/bin/test_cuda_ops --gtest_filter='*Geglu*:*Prepared*:*Grouped*:*Moe*' &&
  passes model 300 build-gpu/bin/test_model --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*:*Argmax*' &&
  ok+=(build-gpu)
sanitize 330 120 build-gpu/bin/test_cuda_ops '*ExpertGegluEpilogue*'
wait
el tested
{ ab64_all build-ng "${ok[@]}"
  for n in 32 17; do
    for d in build-ng "${ok[@]}"; do b $d -p '' -n 32 -b $n -d 1024 -r 2 -ub 4096 --cache-type int8; done
  done
} 2>&1 | tee $OUT/bench.txt
el benched
[ ${#ok[@]} -gt 0 ] && trace_step b64_int8 -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096 --cache-type int8
el done
