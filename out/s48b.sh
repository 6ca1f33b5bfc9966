#!/usr/bin/env bash
# Session 48, the short form of out/s48a.sh for the last device minutes: the probe, main and the
# knock-out copy built as test_cuda_attention only, DISABLED_Perf/i8's 64-sequence lines for main
# and each knock-out (the most telling first), no bench rows.
#   mkdir -p $OUT && OUT=$OUT bash out/s48b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
pool_probe
el probed
rm -rf /tmp/ktree && mkdir -p /tmp/ktree && cp -r CMakeLists.txt bench fuzz include scripts src tests tools /tmp/ktree/
( cd /tmp/ktree && patch -p1 -s < "$OLDPWD/out/s48-knock.patch" && echo patched )
variant build-gpu "" test_cuda_attention &
( cd /tmp/ktree && variant /tmp/ktree/build-k "" test_cuda_attention ) &
wait
el built
perf() {  # perf NAME BIN: DISABLED_Perf/i8's 64-sequence head-size-256 lines
  timeout 60 $2 --gtest_also_run_disabled_tests --gtest_filter='Cache/CudaAttentionKv.DISABLED_Perf/i8' \
    > $OUT/perf-$1.log 2>&1
  echo "$1: $(grep -A3 'decode 64 seqs x 1 @1024, D=256' $OUT/perf-$1.log | awk -F'us' '{print $1}' |
    awk '{print $NF}' | tr '\n' ' ')"
}
{ perf main build-gpu/bin/test_cuda_attention
  for k in 2 1 3 8 0; do HF2Q_KNOCK=$k perf knock$k /tmp/ktree/build-k/bin/test_cuda_attention; el; done
  perf main2 build-gpu/bin/test_cuda_attention
} 2>&1 | tee $OUT/knock.txt
el done
