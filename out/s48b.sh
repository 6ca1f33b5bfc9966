#!/usr/bin/env bash
# Session 48, the short form of out/s48a.sh for the last device minutes: the probe, main and the
# knock-out copy built as test_cuda_attention only, DISABLED_Perf/i8's 64-sequence lines for main
# and each knock-out (the most telling first), no bench rows.
#   mkdir -p $OUT && OUT=$OUT bash out/s48b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
pool_probe
el probed
variant build-gpu "" test_cuda_attention &
knock_tree test_cuda_attention &
wait
el built
{ knock_perf main build-gpu/bin/test_cuda_attention
  for k in 2 1 3 8 0; do HF2Q_KNOCK=$k knock_perf knock$k /tmp/ktree/build-k/bin/test_cuda_attention; el; done
  knock_perf main2 build-gpu/bin/test_cuda_attention
} 2>&1 | tee $OUT/knock.txt
el done
