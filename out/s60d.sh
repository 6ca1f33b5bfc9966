#!/usr/bin/env bash
# Session 60: which tile copies pay (out/s60build.sh's bundle: m none, t the attention's, g the dense MLP's, a both;
# a multi-product launch takes the tile GEMM only where every product has a copy): the tile tests, then 64 and 32
# sequences int8, alternating, and test_model with the attention's copies.
#   run(carry=["out/bin60", "out/s60d.sh"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s60d.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-560}
V=build-v
unbundle out/bin60/bundle60.tar.xz m t g a
synth_g26 /tmp/bund/hf2q_m &
t ops 200 /tmp/bund/test_cuda_ops --gtest_filter='*TileGemm*:*MatmulMulti*'
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in m g t a; do before $((L - 30)) && row $v int8 64; done
  for v in m g; do before $((L - 30)) && row $v int8 32; done
  for v in m g a t; do before $((L - 30)) && row $v int8 64; done
  for v in t a; do before $((L - 30)) && row $v int8 32; done
} 2>&1 | tee $OUT/bench.txt
el bench
if before $((L - 20)); then t model_t 18 /tmp/bund/test_model_t; fi
el done
