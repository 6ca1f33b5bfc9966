#!/usr/bin/env bash
# Session 48: where the keys-by-warp kernel's time goes beyond its memory pipeline (out/pool_probe.cu
# reads the same tiles at 95.5 us on an H100 where the kernel takes about 117): knock-outs of its
# phases, chosen at run time by HF2Q_KNOCK in a patched copy of the tree (out/s48-knock.patch,
# never part of the build): 1 no score MMAs, 2 no P·V, 3 neither, 8 the scores in two chains
# (even and odd steps of the head dimension, summed). Results are wrong under 1-3 (timing only).
# The probe first (fixed: its RB 512 cases had too little shared memory), then main and the copy
# built (test_cuda_attention, hf2q), DISABLED_Perf/i8's 64-sequence lines for main and each
# knock-out, the two-chain form's 8-bit attention tests, and the 64-sequence int8 row of main and
# of the two-chain form alternating while time is left (LIMIT seconds, default 420).
#   mkdir -p $OUT && OUT=$OUT LIMIT=420 bash out/s48a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-420}
pool_probe
el probed
variant build-gpu "" hf2q test_cuda_attention &
knock_tree hf2q test_cuda_attention &
( for i in $(seq 80); do [ -x build-gpu/bin/hf2q ] && break; sleep 5; done
  build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
wait
el built
{ knock_perf main build-gpu/bin/test_cuda_attention
  for k in 0 1 2 3 8; do HF2Q_KNOCK=$k knock_perf knock$k /tmp/ktree/build-k/bin/test_cuda_attention; done
  knock_perf main2 build-gpu/bin/test_cuda_attention
} 2>&1 | tee $OUT/knock.txt
el perfed
HF2Q_KNOCK=8 t chains 100 /tmp/ktree/build-k/bin/test_cuda_attention \
  --gtest_filter='Cache/*/i8:Cache/*/e4m3:-*DISABLED*'
for i in 1 2; do
  before $((L - 30)) || break
  b build-gpu -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8
  HF2Q_KNOCK=8 b /tmp/ktree/build-k -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8
done 2>&1 | tee $OUT/bench.txt
el done
