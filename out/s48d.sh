#!/usr/bin/env bash
# Prepared in session 48: the keys-by-warp kernel's split ring (HF2Q_SPLIT_WARP_SPLIT_RING=1: K and
# V of a stage in separate copy groups, a tile's K stage refilled once its scores are done) against
# main built in the same call, by warp_ab (the 8-bit attention tests and sanitizers on the
# variant, ncu for both, the 64-sequence int8/fp8 rows alternating twice, 8 sequences int8), after
# out/pipe_probe.cu (seconds), which measures the same ring without the arithmetic. About 6
# minutes on an H100. Land it only if it wins here.
#   mkdir -p $OUT && OUT=$OUT bash out/s48d.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/pipe_probe out/pipe_probe.cu && /tmp/pipe_probe | tee $OUT/pipe.txt
el probed
warp_ab sr "-DHF2Q_SPLIT_WARP_SPLIT_RING=1"
