#!/usr/bin/env bash
# Prepared in session 49: the experts' down input prepared by the GEGLU up to 64 tokens
# (HF2Q_MOE_DOWN_PREP=1, cuda_backend.cu's prepared_expert_down_tokens), so the grouped down GEMV
# skips its quantize_q8 launch, against main built in the same call. The new test and the
# prepared/grouped ones on both builds (it runs in every build), memcheck of it on the variant,
# test_model's CUDA, batching, graph and concurrency cases on the variant (20 sequences take the
# new path), then the 64-sequence rows (f16, int8, fp8) alternating twice and 32 sequences.
# About 7 minutes on an H100. Land it (switch on by default, then removed) only if it wins.
#   mkdir -p $OUT && OUT=$OUT bash out/s49e.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-gpu "" hf2q test_cuda_ops &
variant build-dp "-DHF2Q_MOE_DOWN_PREP=1" hf2q test_cuda_ops test_model &
wait
el built
synth_g26 &
F='*Prepared*:*Grouped*:*Moe*'
t ops-main 200 build-gpu/bin/test_cuda_ops --gtest_filter="$F"
ok=()
passes ops-dp 200 build-dp/bin/test_cuda_ops --gtest_filter="$F" &&
  passes model-dp 300 build-dp/bin/test_model --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*:*Argmax*' &&
  ok+=(build-dp)
sanitize 450 100 build-dp/bin/test_cuda_ops '*PreparedExpertDown*'
wait
el tested
{ ab64_all build-gpu "${ok[@]}"
  for d in build-gpu "${ok[@]}"; do b $d -p '' -n 32 -b 32 -d 1024 -r 2 -ub 4096; done
} 2>&1 | tee $OUT/bench.txt
el done
