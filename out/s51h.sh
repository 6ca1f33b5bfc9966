#!/usr/bin/env bash
# Session 51, last call (main at 7eaab69 and after: main with the attention's BF16 rows and the batched
# router kernel up to 32 tokens): the router tests with their token counts at the new bound (17
# and 32 the kernel's, 33 and 64 cuBLAS's product), the MoE, GEGLU and prepared ops, and
# memcheck and racecheck on MoeRouterRouteGroupReplays. ~3 minutes.
#   mkdir -p $OUT && OUT=$OUT bash out/s51h.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-gpu "" test_cuda_ops
el built
passes ops 200 build-gpu/bin/test_cuda_ops --gtest_filter='*Moe*:*Router*:*Geglu*:*Prepared*'
sanitize 240 100 build-gpu/bin/test_cuda_ops '*MoeRouterRouteGroupReplays*'
el done
