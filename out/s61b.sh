#!/usr/bin/env bash
# Session 61: one call for whichever card comes, the rows that decide first. Binaries: `bash out/s61build.sh DIR`
# (out/bin61/bundle61.tar.xz: m no tile copies, g/t/a the tile copies (MLP / attention / both), t4 t at 4 warps a
# block, n Q5_0's lane copy off, f the i8 score fold on; session 61 ran it on the bundle built at 7da271f, where g/t/a
# read the copies up to 64 tokens and a32 was a at 17-32, as main is now). The tile tests beside the synth, then the
# 64-sequence int8 rows (n and f only on an H200, where neither has run), the 32-sequence rows, the 64 again,
# test_model with the attention's copies, the matmul rows at 8 and 4 warps.
#   run(carry=["out/bin61", "out/s61b.sh"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s61b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-560}
V=build-v
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
vs=(m g t a t4)
case "$card" in *H200*) vs+=(n f) ;; esac
echo "card: $card; variants: ${vs[*]}"
unbundle out/bin61/bundle61.tar.xz "${vs[@]}"
synth_g26 /tmp/bund/hf2q_m &
t ops 200 /tmp/bund/test_cuda_ops --gtest_filter='*TileGemm*:*MatmulMulti*'
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in "${vs[@]}"; do before $((L - 110)) && row $v int8 64; done
  for v in m g t a; do before $((L - 90)) && row $v int8 32; done
  for v in "${vs[@]}"; do before $((L - 70)) && row $v int8 64; done
} 2>&1 | tee $OUT/bench.txt
el bench
if before $((L - 40)); then t model_t 25 /tmp/bund/test_model_t; fi
F=(--gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MatmulThroughput')
for o in test_cuda_ops test_ops4; do
  before $((L - 30)) || break
  timeout 25 /tmp/bund/$o "${F[@]}" > $OUT/perf_$o.log 2>&1
  echo "== $o rc=$?"; grep -E "T=   (17|64)" $OUT/perf_$o.log | grep -E "tile copy|cuBLAS" | head -20
done
el done
