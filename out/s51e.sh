#!/usr/bin/env bash
# Session 51, first of two calls (branch wip/s51-all: main with the four prepared branches merged,
# wip/i8-fold, wip/attn-bf16, wip/route-group, wip/batch-router; none run on a GPU before). One
# full build of the merged defaults (fold off, batch router, route-last-group and BF16 rows on)
# with the test binaries; then, in the same build directory, each switch's default set by sed and
# hf2q relinked (one object each), a copy of each binary under build-v/NAME: all (the defaults),
# rg (no BF16 rows), g (route-last-group alone), base (none: main's behaviour), r (batch router
# alone), bf (BF16 rows alone), f (the i8 fold alone, with its attention tests). The tests and the
# sanitizers of the new defaults run beside the rebuilds. out/s51f.sh benches them. ~6 minutes.
#   git checkout wip/s51-all && mkdir -p $OUT && OUT=$OUT bash out/s51e.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
rm -rf build-v
variant build-gpu "" hf2q test_cuda_ops test_cuda_attention test_model
el built
( synth_g26
  passes ops 300 build-gpu/bin/test_cuda_ops --gtest_filter='*Moe*:*Router*:*Geglu*:*Prepared*'
  passes attn 300 build-gpu/bin/test_cuda_attention \
    --gtest_filter='*Bf16Output*:*PreparedOutput*:Cache/*/i8:Cache/*/e4m3:*SplitPlan*:-*DISABLED*'
  passes model 300 build-gpu/bin/test_model --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*:*Argmax*'
  sanitize 480 150 build-gpu/bin/test_cuda_ops '*MoeRouterRouteGroupReplays*:*MoeRouteGroupLastBlockReplays*'
  sanitize 500 100 build-gpu/bin/test_cuda_attention '*Bf16Output*'
  el tested ) > $OUT/tests.txt 2>&1 &
mkdir -p build-v/all/bin && cp build-gpu/bin/hf2q build-v/all/bin/ && cp build-gpu/bin/test_cuda_attention /tmp/attn0
setdef attention.cu HF2Q_ATTN_BF16_ROWS 0 && snap rg
setdef moe.cu HF2Q_BATCH_ROUTER 0 && snap g
setdef moe.cu HF2Q_ROUTE_LAST_GROUP 0 && snap base
setdef moe.cu HF2Q_BATCH_ROUTER 1 && snap r
setdef moe.cu HF2Q_BATCH_ROUTER 0 && setdef attention.cu HF2Q_ATTN_BF16_ROWS 1 && snap bf
setdef attention.cu HF2Q_ATTN_BF16_ROWS 0 && setdef attention_split.cu HF2Q_SPLIT_I8_FOLD 1 && snap f
wait
cat $OUT/tests.txt
more build-gpu test_cuda_attention && el "fold tests built" &&
  passes attn-fold 200 build-gpu/bin/test_cuda_attention --gtest_filter='Cache/*/i8:*SplitPlan*:-*DISABLED*'
K='regex:attention_split_warps_kernel.*256'
for d in /tmp/attn0 build-gpu/bin/test_cuda_attention; do
  before 560 || break
  timeout 60 ncu --section SpeedOfLight --kernel-name-base demangled --kernel-name "$K" --launch-skip 20 \
    --launch-count 1 $d --gtest_also_run_disabled_tests --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/i8" \
    > /tmp/ncu.txt 2>&1
  echo "ncu $d rc=$?"; grep -E "  Duration|DRAM Throughput" /tmp/ncu.txt | head -4
done
ls build-v
el done
