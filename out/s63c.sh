#!/usr/bin/env bash
# Session 63: the experts' gate_up input prepared by residual_norms (g = main with out/s63_prep.patch: f3e8d21 and
# b5ce0e9, taken off main unmeasured) against main (e): the MoE, prepared-input, GEGLU and tile tests,
# test_model, test_synth_engine and test_generation of g, memcheck of the new test, then the 17-64-sequence rows
# alternating. On an H200, then out/s63b.sh with the time left.
# Binaries: out/s63build3.sh (bin63c: e, m, g and g's test binaries *_g), out/s63build2.sh (bin63b: n, f, for s63b).
#   run(carry=["out/bin63b", "out/bin63c"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s63c.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-400}
V=build-v
card=$(nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | head -1)
echo "card: $card"
unbundle out/bin63c/bundle63c.tar.xz e g
synth_g26 /tmp/bund/hf2q_g &
t ops 150 /tmp/bund/test_cuda_ops_g --gtest_filter='*Prepared*:*Geglu*:*Moe*:*Expert*:*TileGemm*:*MatmulMulti*'
t model 200 /tmp/bund/test_model_g
t synth 60 /tmp/bund/test_synth_engine_g
t gen 100 /tmp/bund/test_generation_g
sanitize $((L - 250)) 100 /tmp/bund/test_cuda_ops_g '*PreparedExpertGateUpInputsInBatchedDecode' 2>&1 | tee $OUT/san.log
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ if ! grep -q "FAILED" $OUT/ops.log $OUT/model.log; then
    for i in 1 2; do for n in 64 32; do for v in e g; do before $((L - 60)) && row $v int8 $n; done; done; done
    for v in e g; do before $((L - 45)) && row $v int8 17; done
    for v in e g; do before $((L - 30)) && row $v f16 64; done
  fi
} 2>&1 | tee $OUT/bench.txt
el bench
case "$card" in *H200*) OUT=$OUT LIMIT=$((L - $(date +%s) + t0)) bash out/s63b.sh ;; esac
el done
