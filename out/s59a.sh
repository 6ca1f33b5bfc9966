#!/usr/bin/env bash
# Session 59: the tile GEMM (gemm_tile.cu) on whatever card comes: its tests (and the expert copies' tests, which
# cde6031 changed), then 64 and 32
# sequences of m (main: no tile copies) against t (HF2Q_TILE_COPY 1) and a (3: and the dense MLP's), alternating,
# then the matmul rows against cuBLAS on the BF16 copies, memcheck and racecheck, and test_model with the tile
# copies. Binaries: `bash out/s61build.sh DIR` (session 59 ran it on out/s59build.sh's bundle, at 012ae42).
#   run(carry=["out/bin61", "out/s59a.sh"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s59a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-560}
V=build-v
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
unbundle out/bin61/bundle61.tar.xz m t a
el unpacked
synth_g26 /tmp/bund/hf2q_m &
t ops 200 /tmp/bund/test_cuda_ops --gtest_filter='*TileGemm*:*Expert*:*SmallGemm*:*DecodeLayout*:*MatmulMulti*' &
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in m t a m t a; do before $((L - 40)) && row $v int8 64; done
  for v in m t; do before $((L - 150)) && row $v f16 64; done
  for v in m t a; do before $((L - 150)) && row $v int8 32; done
} 2>&1 | tee $OUT/bench.txt
el bench
before $((L - 45)) && t perf 40 /tmp/bund/test_cuda_ops --gtest_also_run_disabled_tests \
  --gtest_filter='*DISABLED_MatmulThroughput' && grep -E "T=   (17|32|64)" $OUT/perf.log | grep -E "q4_k" | head -40
sanitize $((L - 60)) 60 /tmp/bund/test_cuda_ops '*TileGemm.SmallShapes'
if before $((L - 60)); then t model_t 55 /tmp/bund/test_model_t; fi
el done
