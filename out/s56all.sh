#!/usr/bin/env bash
# For session 56 (wip/s56): every prepared variant in one call. The nine binaries (sm_90a, stripped) travel as
# one tar in xz with a 256 MiB dictionary (out/bin56x/bundle56.tar.xz, 10.4 MB: the near-identical binaries
# compress to almost nothing after the first):
#   tar cf - hf2q_{o,e,c4,wkv,pp} test_cuda_ops_c4 test_cuda_attention_{wkv,pp} test_model_c4 |
#     xz -9e --lzma2=dict=256MiB,preset=9e > out/bin56x/bundle56.tar.xz
# Variants: o main's code, e DS_ODD 0, c4 TURN_COLS 4, wkv (wip/s52's keys-by-warp 16-byte loads + folds),
# pp SPLIT_PAD_SCORES 1 (see out/s56a.sh, s56c.sh, s56d.sh for how each was built).
#   run(carry=["out/bin56x/bundle56.tar.xz"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s> bash out/s56all.sh
# Tests first (their verdicts decide which rows mean anything), then 64 sequences int8/fp8/f16/int8 with the
# five binaries alternating, then 32 sequences int8 of o and c4.
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-600}
V=build-v
unbundle out/bin56x/bundle56.tar.xz o e c4 wkv pp
el unpacked
synth_g26 /tmp/bund/hf2q_o &
t ops-c4 120 /tmp/bund/test_cuda_ops_c4
t att-wkv 90 /tmp/bund/test_cuda_attention_wkv --gtest_filter='-*DISABLED*'
t att-pp 90 /tmp/bund/test_cuda_attention_pp --gtest_filter='-*DISABLED*'
t model-c4 120 /tmp/bund/test_model_c4 --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*'
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for c in int8 fp8 f16 int8; do for v in o e c4 wkv pp; do before $((L - 40)) && row $v $c 64; done; done
  for v in o c4; do before $((L - 20)) && row $v int8 32; done
} 2>&1 | tee $OUT/bench.txt
el done
