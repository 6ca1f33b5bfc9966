#!/usr/bin/env bash
# Session 60: the wgmma tile GEMM's variants (out/s60var.sh: ring slots 5/8, cluster 8/1) on the matmul rows, and
# where the 64-token attn_q launch stalls (ncu's SASS source page and raw stall metrics).
#   run(carry=["out/bin60", "out/s60c.sh"]): mkdir -p $OUT && OUT=$OUT bash out/s60c.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
mkdir -p /tmp/v && for f in out/bin60/ops_*.xz; do xz -dc $f > /tmp/v/$(basename $f .xz); chmod +x /tmp/v/*; done
F=(--gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MatmulThroughput')
for v in s5 s8 s5c1 s8c1; do
  timeout 60 /tmp/v/ops_$v "${F[@]}" > $OUT/perf_$v.log 2>&1
  echo "== $v rc=$?"; grep -E "tile copy" $OUT/perf_$v.log | sed 's/(the tile copy, gemm_tile.cu)//' | head -15
done
el perf
timeout 90 ncu --set full --import-source no -o /tmp/r --kernel-name regex:tile_gemm_kernel --launch-skip 103 \
  --launch-count 1 --kill yes /tmp/v/ops_s5 "${F[@]}" > $OUT/ncu.log 2>&1
echo "ncu rc=$?"
ncu -i /tmp/r.ncu-rep --page source --csv --print-source sass > $OUT/sass.csv 2>&1
ncu -i /tmp/r.ncu-rep --page raw --csv > $OUT/raw.csv 2>&1
echo "sass $(wc -l < $OUT/sass.csv) raw $(wc -c < $OUT/raw.csv)"
el done
