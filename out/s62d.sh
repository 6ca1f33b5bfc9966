#!/usr/bin/env bash
# Session 62: the tile GEMM's clusters of at most 4 (c4: o in 88 blocks of 16 chunks, one wave at one block an SM,
# where 176 blocks of 8 chunks leave some SMs two and others one; ncu found the busiest SM 1.6 times the average)
# against main at 17 and 32 sequences, and x4 against x up to 64 tokens; c4's tile tests and matmul rows.
# Binaries: `bash out/s62build3.sh DIR` (out/bin62d/bundle62d.tar.xz).
#   run(carry=["out/bin62d"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s62d.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-300}
V=build-v
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
unbundle out/bin62d/bundle62d.tar.xz d c4 x x4
synth_g26 /tmp/bund/hf2q_d &
t ops4c 120 /tmp/bund/test_ops4c --gtest_filter='*TileGemm*:*MatmulMulti*'
wait
el tests
grep -q "FAILED" $OUT/ops4c.log && { echo "c4 failed its tests: no rows"; exit 0; }
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for i in 1 2; do
    for v in d c4; do before $((L - 100)) && row $v int8 32; done
    for v in d c4; do before $((L - 90)) && row $v int8 17; done
    for v in x x4; do before $((L - 70)) && row $v int8 64; done
  done
} 2>&1 | tee $OUT/bench.txt
el bench
F=(--gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MatmulThroughput')
for o in test_cuda_ops test_ops4c; do
  before $((L - 30)) || break
  timeout 25 /tmp/bund/$o "${F[@]}" > $OUT/perf_$o.log 2>&1
  echo "== $o rc=$?"; grep -E "T=   (17|32|64)" $OUT/perf_$o.log | grep -E "tile copy" | grep attn_o
done
el done
