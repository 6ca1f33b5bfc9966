#!/usr/bin/env bash
# Session 63's first call (session 62's out/s62e.sh, on one bundle): at most two tile blocks an SM (s2) against main
# (e) at 17-32 sequences, three blocks an SM at 64 tokens (x3) against x (both read the tile copies up to 64 tokens)
# and e at 64 sequences, and both with tile copies of the attention only (xa, xa3), with their tile tests and matmul
# rows; main's tile tests (c501f75's helper); tg128 of main
# with and without the tile copies (e, m).
# Binaries: `bash out/s63build.sh DIR` (out/bin63/bundle63.tar.xz).
#   run(carry=["out/bin63"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s63a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-400}
V=build-v
echo "card: $(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)"
unbundle out/bin63/bundle63.tar.xz e m s2 x x3 xa xa3
synth_g26 /tmp/bund/hf2q_e &
F='*TileGemm*:*MatmulMulti*:*DefaultBackend*'
t ops_e 100 /tmp/bund/test_ops_e --gtest_filter="$F"
t ops_s2 100 /tmp/bund/test_ops_s2 --gtest_filter="$F"
t ops_r3 100 /tmp/bund/test_ops_r3 --gtest_filter="$F"
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ if ! grep -q "FAILED" $OUT/ops_s2.log; then
    for i in 1 2; do for n in 32 17; do for v in e s2; do before $((L - 110)) && row $v int8 $n; done; done; done
    for v in e s2; do before $((L - 100)) && row $v int8 24; done
  fi
  if ! grep -q "FAILED" $OUT/ops_r3.log; then
    for i in 1 2; do for v in e x x3 xa xa3; do before $((L - 70)) && row $v int8 64; done; done
  fi
  for i in 1 2; do for v in e m; do before $((L - 40)) && b $V/$v -p '' -n 128 -b 1 -r 2; done; done
} 2>&1 | tee $OUT/bench.txt
el bench
for o in e s2 r3; do
  before $((L - 25)) || break
  timeout 25 /tmp/bund/test_ops_$o --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MatmulThroughput' \
    > $OUT/perf_$o.log 2>&1
  echo "== $o"; grep -E "T=   (17|32|64)" $OUT/perf_$o.log | grep -E "tile copy"
done
el done
