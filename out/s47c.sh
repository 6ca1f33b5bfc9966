#!/usr/bin/env bash
# Session 47, the short form of out/s47b.sh for the last device minutes: the pool-layout probe,
# main and the head-major variant (-DHF2Q_KV_HEAD_MAJOR=1) built as hf2q only, 64 sequences at
# 1,024 keys int8 / fp8 / int8 / f16 alternating while time is left (LIMIT seconds, default
# 420), then the variant's attention tests if any time is left.
#   mkdir -p $OUT && OUT=$OUT LIMIT=420 bash out/s47c.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-420}
pool_probe
el probed
variant build-gpu "" hf2q &
variant_all build-hm -DHF2Q_KV_HEAD_MAJOR=1 hf2q &
( for i in $(seq 80); do [ -x build-gpu/bin/hf2q ] && break; sleep 5; done
  build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
wait
el built
for c in int8 fp8 int8 f16; do
  before $((L - 50)) || break
  for d in build-gpu build-hm; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type $c; done
done 2>&1 | tee $OUT/bench.txt
el benched
before $((L - 150)) && more build-hm test_cuda_attention &&
  t attention-hm 100 build-hm/bin/test_cuda_attention --gtest_filter='Cache/*:-*DISABLED*'
el done
