#!/usr/bin/env bash
# Session 62's last call, out/s62e.sh cut to what fits the session's last device minutes: s2 (at most two tile blocks
# an SM) against main (e) at 32 and 17 sequences, after s2's tile tests.
#   run(carry=["out/bin62e"]): mkdir -p $OUT && OUT=$OUT bash out/s62f.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
V=build-v
echo "card: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
unbundle out/bin62e/bundle62e.tar.xz e s2
synth_g26 /tmp/bund/hf2q_e &
t ops_s2 60 /tmp/bund/test_ops_s2 --gtest_filter='*TileGemm*:*MatmulMulti*'
wait
grep -q "FAILED" $OUT/ops_s2.log && exit 0
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
for n in 32 17 32; do for v in e s2; do row $v int8 $n; done; done 2>&1 | tee $OUT/bench.txt
el done
