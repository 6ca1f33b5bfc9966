#!/usr/bin/env bash
# Session 63: main's summary rows on an H200 (none has run since session 54: Q5_0's lane copy, on since session 58,
# and the tile copies of 17-32 tokens, on since session 61, are in main now), with the A/Bs only an H200 can judge:
# n (the lane copy off) and f (the i8 score fold on) at 64 sequences, and tg128 with and without the tile copies
# (m). On any other card it says which came and stops.
# Binaries: out/s63build3.sh (bin63c: e, m), out/s63build2.sh (bin63b: n, f).
#   run(kind="nvidia-h200", carry=["out/bin63c", "out/bin63b"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> \
#     bash out/s63b.sh
cd "$(dirname "$0")/.."
card=$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)
echo "card: $card"
case "$card" in *H200*) ;; *) exit 0 ;; esac
source out/device_lib.sh
L=${LIMIT:-400}
V=build-v
unbundle out/bin63c/bundle63c.tar.xz e m
unbundle out/bin63b/bundle63b.tar.xz n f
[ -s /tmp/g26.gguf ] || synth_g26 /tmp/bund/hf2q_e
el synth
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for i in 1 2; do for v in e n f; do before $((L - 130)) && row $v int8 64; done; done
  for i in 1 2; do for v in e m; do before $((L - 90)) && b $V/$v -p '' -n 128 -b 1 -r 2; done; done
  for v in e f; do before $((L - 70)) && row $v fp8 64; done
  before $((L - 55)) && row e f16 64
  for v in e m; do before $((L - 45)) && row $v int8 32; done
  before $((L - 30)) && b $V/e -p 4096 -n '' -r 2 -ub 4096
} 2>&1 | tee $OUT/bench.txt
el done
