#!/usr/bin/env bash
# Session 62, the tile GEMM's producer form (HF2Q_TILE_PRODUCER 1: a copying warp and mbarriers in place of the block
# barrier and each warp's copies): its tests and the sanitizers (racecheck: the mbarriers), then the A/B against main
# at 17-32 tokens (d, p) and 64 (x, px: both read the copies up to 64), the matmul rows of both forms, and ncu's stalls
# of the producer form at 64 tokens. Binaries: `bash out/s62build2.sh DIR` (out/bin62b/bundle62b.tar.xz).
#   run(carry=["out/bin62b"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s62b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-520}
V=build-v
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
unbundle out/bin62b/bundle62b.tar.xz d x p px
synth_g26 /tmp/bund/hf2q_d &
ok=0
t opsP 120 /tmp/bund/test_opsP --gtest_filter='*TileGemm*:*MatmulMulti*' && grep -q "^\[  PASSED" $OUT/opsP.log &&
  ! grep -q "FAILED" $OUT/opsP.log && ok=1
t modelP 60 /tmp/bund/test_modelP
grep -q "FAILED" $OUT/modelP.log && ok=0
wait
el tests
sanitize 150 40 /tmp/bund/test_opsP '*TileGemm.SmallShapes:*TileGemm.DefaultBackend*'
el sanitizers
[ $ok = 1 ] || { echo "the producer form failed its tests: no rows"; exit 0; }
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for i in 1 2; do
    for v in d x px; do before $((L - 150)) && row $v int8 64; done
    for v in d p; do before $((L - 130)) && row $v int8 32; done
  done
  for v in d p; do before $((L - 110)) && row $v int8 17; done
  for v in d p; do before $((L - 100)) && row $v f16 32; done
} 2>&1 | tee $OUT/bench.txt
el bench
F=(--gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MatmulThroughput')
for o in test_cuda_ops test_opsP; do
  before $((L - 70)) || break
  timeout 25 /tmp/bund/$o "${F[@]}" > $OUT/perf_$o.log 2>&1
  echo "== $o rc=$?"; grep -E "T=   (17|32|64)" $OUT/perf_$o.log | grep -E "tile copy" | head -12
done
if before $((L - 40)); then
  timeout 40 ncu --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__cycles_active.avg,sm__cycles_active.max,gpc__cycles_elapsed.max,smsp__inst_executed.sum' \
    --kernel-name-base demangled --kernel-name 'regex:tile_gemm_producer_kernel<.int.64>' --launch-skip 3 \
    --launch-count 1 /tmp/bund/test_opsP "${F[@]}" > $OUT/ncu.txt 2>&1
  echo "ncu rc=$?"; grep -E "stalled|cycles|inst_exec" $OUT/ncu.txt | awk '$NF+0 > 0.04' | head -20
fi
el done
