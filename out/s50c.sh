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
# (out/s50b.sh's steps: the two versions differ only in the kernel the branch holds.)
exec bash "$(dirname "$0")/s50b.sh"
