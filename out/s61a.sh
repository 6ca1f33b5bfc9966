#!/usr/bin/env bash
# Session 61 (prepared in session 60, not yet run): which tile copies pay, and 64-row tile blocks. Binaries:
# `bash out/s61build.sh DIR` (out/bin61/bundle61.tar.xz: m none, g the dense MLP's copies, t the attention's,
# a both, t4/a4 at 4 warps a block, a32 a at 17-32 tokens only). The tile tests first, then the 64-sequence int8
# A/B in the order that decides, the 32-sequence rows, the matmul rows at 8 and 4 warps, and test_model with the
# attention's copies.
#   run(carry=["out/bin61", "out/s61a.sh"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s61a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-560}
V=build-v
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
unbundle out/bin61/bundle61.tar.xz m t g a t4 a4 a32
synth_g26 /tmp/bund/hf2q_m &
t ops 200 /tmp/bund/test_cuda_ops --gtest_filter='*TileGemm*:*MatmulMulti*'
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in m g t a t4 a4 m g t a t4 a4; do before $((L - 140)) && row $v int8 64; done
  for v in m g t a t4 a4 a32 m a32; do before $((L - 90)) && row $v int8 32; done
  for v in m a32; do before $((L - 80)) && row $v int8 64; done
} 2>&1 | tee $OUT/bench.txt
el bench
F=(--gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MatmulThroughput')
for o in test_cuda_ops test_ops4; do
  before $((L - 50)) || break
  timeout 40 /tmp/bund/$o "${F[@]}" > $OUT/perf_$o.log 2>&1
  echo "== $o rc=$?"; grep -E "T=   (17|64)" $OUT/perf_$o.log | grep -E "tile copy|cuBLAS" | head -20
done
if before $((L - 20)); then t model_t 18 /tmp/bund/test_model_t; fi
el done
