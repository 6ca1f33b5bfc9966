#!/usr/bin/env bash
# Session 50, second version of the batched router kernel (branch wip/batch-router; never run on
# a GPU): 16 warps a block, three MMA chains. Batched decode's router product, routing and
# grouping in one cluster kernel (moe.cu's moe_router_batch_kernel, 17-64 tokens, on by default)
# against the cuBLAS product and the two routing kernels (-DHF2Q_BATCH_ROUTER=0), both built in
# this call. The MoE and router tests, test_model's CUDA, batching, graph and concurrency cases
# and the sanitizers on the new default; then the 64-sequence rows (f16, int8, fp8) alternating
# twice, 32, 17 and 8 sequences, and a CUPTI trace of the int8 step. The first version lost 8 %
# (out/s50b.sh). About 7 minutes on an H100.
#   git checkout wip/batch-router && mkdir -p $OUT && OUT=$OUT bash out/s50c.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-gpu "" hf2q test_cuda_ops test_model hf2q_cupti_trace &
variant build-nr "-DHF2Q_BATCH_ROUTER=0" hf2q &
wait
el built
synth_g26 &
ok=()
passes ops 300 build-gpu/bin/test_cuda_ops --gtest_filter='*Moe*:*Router*:*Geglu*:*Prepared*' &&
  passes model 300 build-gpu/bin/test_model --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*:*Argmax*' &&
  ok+=(build-gpu)
sanitize 330 150 build-gpu/bin/test_cuda_ops '*MoeRouterRouteGroupReplays*'
wait
el tested
{ for i in 1 2; do
    for c in f16 int8 fp8; do
      for d in build-nr "${ok[@]}"; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type $c; done
    done
  done
  for n in 32 17 8; do
    for d in build-nr "${ok[@]}"; do b $d -p '' -n 32 -b $n -d 1024 -r 2 -ub 4096 --cache-type int8; done
  done
} 2>&1 | tee $OUT/bench.txt
el benched
[ ${#ok[@]} -gt 0 ] && trace_step b64_int8 -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096 --cache-type int8
el done
