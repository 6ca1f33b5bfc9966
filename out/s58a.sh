#!/usr/bin/env bash
# Session 58: Q5_0's lane copy after c8c778d's fix (a copy only where the warp-a-tile kernel's shared memory holds
# the rows), against main in the same call. Binaries from `bash out/s57build.sh DIR` (o, lanes, fold; the tests have
# both switches on).
#   run(carry=["out/bin57x"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s58a.sh
# The lane copy's tests, all of test_cuda_ops, memcheck and racecheck of the lane tests, then the rows alternating
# (64 sequences int8 three times, fp8, f16; 32 sequences; tg128 of one sequence), then a CUPTI trace of o and lanes.
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-580}
V=build-v
unbundle out/bin57x/bundle57.tar.xz fold lanes o
el unpacked
synth_g26 /tmp/bund/hf2q_o &
t ops-all 150 /tmp/bund/test_cuda_ops &
wait
el tests
for tool in memcheck racecheck; do
  timeout 90 compute-sanitizer --tool $tool --error-exitcode 1 --print-limit 20 /tmp/bund/test_cuda_ops \
    --gtest_filter='*ExpertLane*' > $OUT/san-$tool.log 2>&1
  echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" $OUT/san-$tool.log | head -4
done
el sanitizers
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in lanes o lanes o lanes o; do before $((L - 150)) && row $v int8 64; done
  for v in lanes o; do before $((L - 150)) && row $v fp8 64; done
  for v in lanes o; do before $((L - 150)) && row $v f16 64; done
  for v in lanes o; do before $((L - 150)) && row $v int8 32; done
  for v in lanes o; do before $((L - 150)) && b $V/$v -p '' -n 128 -b 1 -r 2; done
} 2>&1 | tee $OUT/bench.txt
el bench
for v in lanes o; do
  before $((L - 45)) || break
  CUDA_INJECTION64_PATH=$PWD/out/bin57x/libhf2q_cupti_trace.so HF2Q_TRACE_OUT=/tmp/trace-$v.csv \
    timeout 40 $V/$v/bin/hf2q bench -m /tmp/g26.gguf --backend cuda -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096 \
    --cache-type int8 > /tmp/trace-$v.log 2>&1
  echo "trace $v rc=$?"
  python3 scripts/trace_summary.py /tmp/trace-$v.csv --skip 4 > $OUT/trace-$v.txt 2>&1
  head -12 $OUT/trace-$v.txt | cut -c1-100
done
el done
