#!/usr/bin/env bash
# Session 58, the short form of out/s58b.sh for a call of about 4 minutes, run only where the card is an H200
# (elsewhere it says which card came and stops): the lane copy's tests beside the synth, then the rows of m (main),
# n (the lane copy off) and f (m + the i8 score fold) alternating. Binaries: `bash out/s58build.sh DIR`.
#   run(carry=["out/bin58"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s58f.sh
cd "$(dirname "$0")/.."
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
case "$card" in *H200*) ;; *) exit 0 ;; esac
source out/device_lib.sh
L=${LIMIT:-240}
V=build-v
unbundle out/bin58/bundle58.tar.xz m n f
synth_g26 /tmp/bund/hf2q_m &
t ops 60 /tmp/bund/test_cuda_ops --gtest_filter='*ExpertLane*:*ExpertScaled*' &
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in m n f m n f; do before $((L - 25)) && row $v int8 64; done
  for v in m n; do before $((L - 25)) && row $v fp8 64; done
  for v in m n; do before $((L - 25)) && b $V/$v -p '' -n 128 -b 1 -r 2; done
  for v in m n; do before $((L - 25)) && row $v f16 64; done
} 2>&1 | tee $OUT/bench.txt
el done
