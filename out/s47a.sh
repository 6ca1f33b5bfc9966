#!/usr/bin/env bash
# Prepared in session 46 (device time spent): the keys-by-warp kernel reading each tile's block-table
# entries an iteration ahead (HF2Q_SPLIT_WARP_LOOKUP_AHEAD=1; ncu put 15 % of its stalls on that
# load's first use) against main built in the same call: the 8-bit attention tests and the
# sanitizers on the variant, ncu's duration for both (DISABLED_Perf's 64-sequence i8 case), then the
# 64-sequence int8/fp8 rows alternating twice and 8 sequences. Land it only if it wins here.
#   mkdir -p $OUT && OUT=$OUT bash out/s47a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
# The pool-layout probe first (seconds): whether 256-byte runs bind the 8-bit kernels' reads.
pool_probe
warp_ab la "-DHF2Q_SPLIT_WARP_LOOKUP_AHEAD=1"
