#!/usr/bin/env bash
# Session 46: the keys-by-warp kernel's tile copies without the source-size operand
# (HF2Q_SPLIT_WARP_COPY_PLAIN=1: cp.async of the rows that exist, plain zero stores for rows past
# the split) against main built in the same call: the 8-bit attention tests and the sanitizers on
# the variant, ncu's excess-sector verdict and duration for both (DISABLED_Perf's 64-sequence i8
# case, as out/s46e.sh), then the 64-sequence int8/fp8 rows alternating twice and 8 sequences.
#   mkdir -p $OUT && OUT=$OUT bash out/s46i.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
warp_ab cp "-DHF2Q_SPLIT_WARP_COPY_PLAIN=1"
