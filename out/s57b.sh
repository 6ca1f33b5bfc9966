#!/usr/bin/env bash
# Session 57, the short form of out/s57a.sh (same binaries: out/s57build.sh) for a call of 2-4 minutes: the lane
# copy's and the i8 fold's kernel tests beside the synth, then 64-sequence int8 rows of fold, lanes and o.
#   run(carry=["out/bin57x"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s> bash out/s57b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-240}
V=build-v
unbundle out/bin57x/bundle57.tar.xz fold lanes o
synth_g26 /tmp/bund/hf2q_fold &
t ops 60 /tmp/bund/test_cuda_ops --gtest_filter='*ExpertLane*:*ExpertScaled*:*GroupedIntegerGemvPass*' &
t att 60 /tmp/bund/test_cuda_attention --gtest_filter='Cache/*/i8:-*DISABLED*' &
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in fold lanes o fold lanes o; do before $((L - 25)) && row $v int8 64; done
  for v in lanes o; do before $((L - 25)) && row $v fp8 64; done
} 2>&1 | tee $OUT/bench.txt
el done
