#!/usr/bin/env bash
# For the next session (branch wip/attn-bf16, prepared in session 50, never run on a GPU): the
# attention's split kernel and combiner write the output's BF16 rows (AttentionParams::out_bf16),
# so batched decode's output projection needs no conversion kernel, against a separate
# conversion pass (-DHF2Q_ATTN_BF16_ROWS=0, the cost the matmul paid before). The new test
# CudaAttentionKv.Bf16Output and the prepared/8-bit attention tests, test_model's CUDA, batching,
# graph and concurrency cases and the sanitizers on the new default; then the 64-sequence rows
# alternating twice, 32 and 17 sequences. About 6 minutes (H100).
#   git checkout wip/attn-bf16 && mkdir -p $OUT && OUT=$OUT bash out/s51d.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-gpu "" hf2q test_cuda_attention test_model &
variant build-ab "-DHF2Q_ATTN_BF16_ROWS=0" hf2q &
wait
el built
synth_g26 &
ok=()
F='*Bf16Output*:*PreparedOutput*:Cache/*/i8:-*DISABLED*'
passes attn 300 build-gpu/bin/test_cuda_attention --gtest_filter="$F" &&
  passes model 300 build-gpu/bin/test_model --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*:*Argmax*' &&
  ok+=(build-gpu)
sanitize 330 150 build-gpu/bin/test_cuda_attention '*Bf16Output*'
wait
el tested
{ ab64_all build-ab "${ok[@]}"
  for n in 32 17; do
    for d in build-ab "${ok[@]}"; do b $d -p '' -n 32 -b $n -d 1024 -r 2 -ub 4096 --cache-type int8; done
  done
} 2>&1 | tee $OUT/bench.txt
el done
