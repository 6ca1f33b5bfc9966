#!/usr/bin/env bash
# Session 60: the tile GEMM on wgmma (gemm_tile.cu, 128-row blocks): its tests, the 64-sequence int8 A/B of m (no tile
# copies), t (HF2Q_TILE_COPY 1) and a (3), the matmul rows, ncu of one 64-token attn_q launch, the step's trace of t,
# the sanitizers and test_model with the copies. Binaries: `bash out/s61build.sh DIR` (out/bin61/bundle61.tar.xz).
#   run(carry=["out/bin61", "out/bin60", "out/s60b.sh"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s60b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-560}
V=build-v
LIB=$PWD/out/bin60/libhf2q_cupti_trace.so
unbundle out/bin61/bundle61.tar.xz m t a
synth_g26 /tmp/bund/hf2q_m &
t ops 200 /tmp/bund/test_cuda_ops --gtest_filter='*TileGemm*:*MatmulMulti*'
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in m t a m t a; do before $((L - 200)) && row $v int8 64; done
  for v in m t a; do before $((L - 200)) && row $v int8 32; done
} 2>&1 | tee $OUT/bench.txt
el bench
before $((L - 150)) && t perf 40 /tmp/bund/test_cuda_ops --gtest_also_run_disabled_tests \
  --gtest_filter='*DISABLED_MatmulThroughput' && grep -E "T=   (17|32|64)" $OUT/perf.log | grep -E "q4_k" | head -40
MM=(/tmp/bund/test_cuda_ops --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MatmulThroughput')
if before $((L - 120)); then
  timeout 60 ncu --set full --kernel-name regex:tile_gemm_kernel --launch-skip 103 --launch-count 1 --kill yes \
    "${MM[@]}" > $OUT/ncu_103.txt 2>&1
  echo "ncu rc=$?"; grep -E "  Duration|Compute \(SM\) Throughput|DRAM Th|Issued Warp|Registers Per|Achieved Occ" \
    $OUT/ncu_103.txt | head -8
fi
if before $((L - 90)); then
  CUDA_INJECTION64_PATH=$LIB HF2Q_TRACE_OUT=/tmp/tr_t.csv timeout 60 $V/t/bin/hf2q bench -m /tmp/g26.gguf \
    --backend cuda -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8 > $OUT/tr_t.log 2>&1
  echo "trace t rc=$?"; python3 scripts/trace_summary.py /tmp/tr_t.csv --skip 4 > $OUT/trace_t.txt 2>&1
  head -14 $OUT/trace_t.txt
fi
sanitize $((L - 60)) 60 /tmp/bund/test_cuda_ops '*TileGemm.SmallShapes'
if before $((L - 60)); then t model_t 55 /tmp/bund/test_model_t; fi
el done
