#!/usr/bin/env bash
# Session 54, when device time is short: no build on the device. Binaries built on the CPU machine (sm_90a,
# stripped, xz) and carried in out/bin54x: d (wip/s52's defaults, main's behaviour), cap (HF2Q_CAP_EVERY_LOGIT 1,
# main before session 52), df (HF2Q_DENSE_FIRST 1) and q4k (wip/s53-q4k: the Q4_K experts' scaled copy, against
# its own --no-expert-copy). The 64-sequence int8 rows alternating, twice, then fp8 and 32-sequence int8 rows
# while time is left.
#   run(carry=["out/bin54x","out/s54c.sh"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s> bash out/s54c.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-600}
for v in d cap df q4k; do
  mkdir -p build-v/$v/bin && xz -dc out/bin54x/hf2q_$v.xz > build-v/$v/bin/hf2q && chmod +x build-v/$v/bin/hf2q
done
synth_v d
el synth
row() {  # row VARIANT CACHE SEQS: one bench line; q4k and q4kn are the same binary with and without its copy
  local v=$1 x=""
  [ $v = q4kn ] && { v=q4k; x=--no-expert-copy; }
  b build-v/$v -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2 $x
}
{ for i in 1 2; do
    for v in d cap df q4k q4kn; do before $((L - 30)) && row $v int8 64; done
  done
  for v in d cap df q4k q4kn; do before $((L - 30)) && row $v fp8 64; done
  for v in d df q4k q4kn; do before $((L - 25)) && row $v int8 32; done
  for v in d cap df q4k q4kn; do before $((L - 30)) && row $v f16 64; done
} 2>&1 | tee $OUT/bench.txt
el done
