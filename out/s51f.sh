#!/usr/bin/env bash
# Session 51, second call (after out/s51e.sh on the same warm machine; its build-v binaries): the
# 64-sequence int8 rows of every variant alternating twice, then f16 and fp8 of base and all, 32
# and 17 sequences (base, all, and the variants that won at 64), and a CUPTI trace of all's int8
# step if build-gpu's tracer is built. ~6 minutes.
#   mkdir -p $OUT && OUT=$OUT bash out/s51f.sh [VARIANTS...]
cd "$(dirname "$0")/.."
source out/device_lib.sh
[ -s /tmp/g26.gguf ] || { build-v/all/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast \
  --force -o /tmp/g26.gguf > /tmp/synth.log 2>&1; el synth; }
V=("$@"); [ ${#V[@]} -gt 0 ] || V=(base all rg g r bf f)
{ for i in 1 2; do
    for v in "${V[@]}"; do b build-v/$v -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8; done
  done
  el int8
  for c in f16 fp8; do
    for v in base all base all; do b build-v/$v -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type $c; done
  done
  el f16-fp8
  for n in 32 17; do
    for v in base all base all; do b build-v/$v -p '' -n 32 -b $n -d 1024 -r 2 -ub 4096 --cache-type int8; done
  done
} 2>&1 | tee $OUT/bench.txt
el done
