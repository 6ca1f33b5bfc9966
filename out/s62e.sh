#!/usr/bin/env bash
# Session 62's last call: at most two tile blocks an SM (s2) against main (e) at 17-32 sequences, and three blocks an
# SM at 64 tokens (x3) against x (both read the tile copies up to 64 tokens) at 64 sequences, with their tile tests
# and matmul rows; tg128 of main with and without the tile copies again (d, m of out/bin62); on an H200 also session
# 61's n (Q5_0's lane copy off) and f (the i8 score fold on) against m61 at 64 sequences (out/bin61).
# Binaries: `bash out/s62build4.sh DIR` (out/bin62e/bundle62e.tar.xz), out/bin62, out/bin61.
#   run(carry=["out/bin62e", "out/bin62", "out/bin61"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s62e.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-400}
V=build-v
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
unbundle out/bin62/bundle62.tar.xz d m
unbundle out/bin62e/bundle62e.tar.xz e s2 x x3
h200=0
case "$card" in *H200*) h200=1 ;; esac
if [ $h200 = 1 ] && [ -f out/bin61/bundle61.tar.xz ]; then
  mkdir -p /tmp/b61 && xz -dc out/bin61/bundle61.tar.xz | tar xf - -C /tmp/b61 ./hf2q_m ./hf2q_n ./hf2q_f
  for v in m n f; do mkdir -p $V/${v}61/bin && cp /tmp/b61/hf2q_$v $V/${v}61/bin/hf2q && chmod +x $V/${v}61/bin/hf2q; done
fi
synth_g26 /tmp/bund/hf2q_e &
t ops_s2 100 /tmp/bund/test_ops_s2 --gtest_filter='*TileGemm*:*MatmulMulti*'
t ops_r3 100 /tmp/bund/test_ops_r3 --gtest_filter='*TileGemm*:*MatmulMulti*'
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ if ! grep -q "FAILED" $OUT/ops_s2.log; then
    for i in 1 2; do for n in 32 17; do for v in e s2; do before $((L - 110)) && row $v int8 $n; done; done; done
    for v in e s2; do before $((L - 100)) && row $v int8 24; done
  fi
  if ! grep -q "FAILED" $OUT/ops_r3.log; then
    for i in 1 2; do for v in e x x3; do before $((L - 80)) && row $v int8 64; done; done
  fi
  for i in 1 2; do for v in d m; do before $((L - 70)) && b $V/$v -p '' -n 128 -b 1 -r 2; done; done
  if [ $h200 = 1 ]; then
    for v in m61 n61 f61; do before $((L - 35)) && row $v int8 64; done
    for v in e m; do before $((L - 20)) && row $v int8 32; done
  fi
} 2>&1 | tee $OUT/bench.txt
el bench
for o in s2 r3; do
  before $((L - 25)) || break
  timeout 25 /tmp/bund/test_ops_$o --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MatmulThroughput' \
    > $OUT/perf_$o.log 2>&1
  grep -E "T=   (17|32|64)" $OUT/perf_$o.log | grep -E "tile copy"
done
el done
