#!/usr/bin/env bash
# For the next H200 (session 49 had only H100s): the H100 findings of out/s49a.sh and s49b.sh on
# the card the target is set for. The pipeline probe (seconds), then out/s49a.sh with the
# knock-outs that told most on the H100 (16 and 64: KV in L2; 19: in L2 without arithmetic; 3:
# from DRAM without it): main and the knock-out copy built together, DISABLED_Perf/i8's
# 64-sequence lines, CUPTI traces of the 64-sequence step with the int8 and f16 caches. About 5
# minutes.
#   mkdir -p $OUT && OUT=$OUT bash out/s49d.sh
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/pipe_probe out/pipe_probe.cu && /tmp/pipe_probe > $OUT/pipe.txt 2>&1
grep -E "copy|W 4 S 3  " $OUT/pipe.txt | head -6
bash out/s49a.sh 16 64 19 3 0
