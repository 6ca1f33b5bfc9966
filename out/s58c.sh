#!/usr/bin/env bash
# Session 58: one sequence's tg128 with Q5_0's lane copy (m) and without (n), alternating (out/s58build.sh's bundle);
# with X=1, each also with --no-expert-copy (no copy of either kind), to tell the copy's memory from the code.
#   run(carry=["out/bin58"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s58c.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-200}
V=build-v
nvidia-smi --query-gpu=name --format=csv,noheader
unbundle out/bin58/bundle58.tar.xz m n
synth_g26 /tmp/bund/hf2q_m
el synth
if [ "${X:-0}" = 1 ]; then
  for v in m n m n; do for x in "" --no-expert-copy; do before $((L - 20)) && b $V/$v -p '' -n 128 -b 1 -r 3 $x; done
  done 2>&1 | tee $OUT/bench.txt
else
  for v in m n m n m n; do before $((L - 20)) && b $V/$v -p '' -n 128 -b 1 -r 3; done 2>&1 | tee $OUT/bench.txt
fi
el done
