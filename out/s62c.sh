#!/usr/bin/env bash
# Session 62: what the tile copies cost one sequence (tg128, d = main against m = no tile copies, out/bin62), and on an
# H200 also session 61's n (Q5_0's lane copy off) and f (the i8 score fold on) against m61 (out/bin61, 7da271f, no tile
# copies) at 64 sequences, and the copies' gain at 32 sequences (d against m).
#   run(carry=["out/bin62", "out/bin61"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s62c.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-300}
V=build-v
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
unbundle out/bin62/bundle62.tar.xz d m
h200=0
case "$card" in *H200*) h200=1 ;; esac
if [ $h200 = 1 ]; then
  mkdir -p /tmp/b61 && xz -dc out/bin61/bundle61.tar.xz | tar xf - -C /tmp/b61 ./hf2q_m ./hf2q_n ./hf2q_f
  for v in m n f; do mkdir -p $V/${v}61/bin && cp /tmp/b61/hf2q_$v $V/${v}61/bin/hf2q && chmod +x $V/${v}61/bin/hf2q; done
fi
synth_g26 /tmp/bund/hf2q_d
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for i in 1 2; do for v in d m; do before $((L - 60)) && b $V/$v -p '' -n 128 -b 1 -r 2; done; done
  if [ $h200 = 1 ]; then
    for i in 1 2; do for v in m61 n61 f61; do before $((L - 40)) && row $v int8 64; done; done
    for v in d m; do before $((L - 25)) && row $v int8 32; done
    for v in d m; do before $((L - 15)) && row $v int8 64; done
  fi
} 2>&1 | tee $OUT/bench.txt
el done
