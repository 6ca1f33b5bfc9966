#!/usr/bin/env bash
# For session 57 (or any later one; main's tree is enough): the H200 measurements session 56 could not get,
# from the binaries session 56 built (out/bin56x/bundle56.tar.xz, ignored; out/s56all.sh's header says what
# each is and out/bundle.sh how to pack them again if this machine was reset):
#   o    main's code (34d7b3e = 6f6ded7's kernels), e the pairs' old stride (HF2Q_GEMV_MMA_DS_ODD 0),
#   wkv  wip/s52's keys-by-warp 16-byte loads with both i8 folds
#   run(carry=["out/bin56x/bundle56.tar.xz"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s> bash out/s57a.sh
# About 7 minutes: wkv's whole test_cuda_attention (session 56's 90-second limit cut it short), then 64
# sequences int8 (twice), fp8 and f16 with o, e and wkv alternating, then 32 sequences int8 and tg128.
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-600}
V=build-v
unbundle out/bin56x/bundle56.tar.xz o e wkv
synth_g26 /tmp/bund/hf2q_o &
t att-wkv 240 /tmp/bund/test_cuda_attention_wkv --gtest_filter='-*DISABLED*'
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for c in int8 fp8 f16 int8; do for v in o e wkv; do before $((L - 45)) && row $v $c 64; done; done
  for v in o e wkv; do before $((L - 30)) && row $v int8 32; done
  for v in o wkv; do before $((L - 15)) && b $V/$v -p '' -n 128 -b 1 -r 2; done
} 2>&1 | tee $OUT/bench.txt
el done
