#!/usr/bin/env bash
# Session 60: where the tile GEMM (gemm_tile.cu) spends its time. ncu (full set) of one 64-token launch each of
# attn_q, attn_o and the full layers' q from DISABLED_MatmulThroughput; a CUPTI kernel timeline of that test (every
# kernel's duration: cuBLAS on the BF16 copy beside the tile kernel); and the 64-sequence int8 step of m and t
# (out/s61build.sh's bundle) through scripts/trace_summary.py.
#   run(carry=["out/bin61", "out/bin60", "out/s60a.sh"]): mkdir -p $OUT && OUT=$OUT bash out/s60a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
unbundle out/bin61/bundle61.tar.xz m t
LIB=$PWD/out/bin60/libhf2q_cupti_trace.so
synth_g26 /tmp/bund/hf2q_m > $OUT/synth.txt 2>&1 &
MM=(/tmp/bund/test_cuda_ops --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MatmulThroughput')
for sk in 103 409 562; do
  timeout 100 ncu --set full --kernel-name regex:tile_gemm_kernel --launch-skip $sk --launch-count 1 --kill yes \
    "${MM[@]}" > $OUT/ncu_$sk.txt 2>&1
  echo "ncu $sk rc=$?"; grep -E "^  [a-zA-Z_ ]*tile_gemm|  Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Th" \
    $OUT/ncu_$sk.txt | head -8
done
el ncu
CUDA_INJECTION64_PATH=$LIB HF2Q_TRACE_OUT=/tmp/mm.csv timeout 150 "${MM[@]}" > $OUT/mm.log 2>&1
echo "mm trace rc=$?"; xz -c /tmp/mm.csv > $OUT/mm.csv.xz
el mm
wait; cat $OUT/synth.txt
for v in m t; do
  CUDA_INJECTION64_PATH=$LIB HF2Q_TRACE_OUT=/tmp/tr_$v.csv timeout 150 build-v/$v/bin/hf2q bench -m /tmp/g26.gguf \
    --backend cuda -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8 > $OUT/tr_$v.log 2>&1
  echo "trace $v rc=$?"; python3 scripts/trace_summary.py /tmp/tr_$v.csv --skip 4 > $OUT/trace_$v.txt 2>&1
  head -30 $OUT/trace_$v.txt
done
el done
