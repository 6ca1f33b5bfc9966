#!/usr/bin/env bash
# Session 53's last device seconds (branch wip/s53-q4k): the 64-sequence int8 row with the scaled copy and with
# --no-expert-copy, alternating, from the carried binaries (out/s53g.sh without its tests). About 50 seconds.
cd "$(dirname "$0")/.."
source out/device_lib.sh
B=out/bin53
[ -x $B/hf2q ] || { mkdir -p $B && for f in out/bin53x/hf2q.xz; do xz -dc $f > $B/hf2q; chmod +x $B/hf2q; done; }
$B/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf > /tmp/synth.log 2>&1
el synth
for i in 1 2; do
  for x in "" --no-expert-copy; do
    echo "int8 64 $x :: $(timeout 30 $B/hf2q bench -m /tmp/g26.gguf --backend cuda -p '' -n 32 -b 64 -d 1024 -r 2 \
      -ub 4096 --cache-type int8 $x 2>&1 | grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
  done
done
el done
