#!/usr/bin/env bash
# For session 53's last device minutes (branch wip/s53-q4k): out/s53f.sh cut to about 4 minutes: the scaled
# copy's tests, DISABLED_MoeThroughput's gate_up/geglu rows with and without it, and the 64-sequence int8 row
# with the copy and with --no-expert-copy.
#   run(carry=["out/bin53x"]): mkdir -p $OUT && OUT=$OUT bash out/s53g.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
B=out/bin53
if [ ! -x $B/hf2q ]; then
  mkdir -p $B && for f in out/bin53x/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
fi
$B/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf > /tmp/synth.log 2>&1 &
t ops 90 $B/test_cuda_ops --gtest_filter='*ExpertScaled*:*ExpertGeglu*'
timeout 45 $B/test_cuda_ops --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MoeThroughput*' 2>&1 |
  grep --line-buffered "perf \] moe" | grep --line-buffered -E "(gate_up|geglu).*T=( {3}64| {2}512).*device" |
  tee $OUT/moe.txt
wait
el synth; tail -1 /tmp/synth.log
bb() {
  echo "$* :: $(timeout 100 $B/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 |
    grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
}
{ for i in 1 2; do
    for x in "" --no-expert-copy; do before 200 && bb -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8 $x; done
  done
} 2>&1 | tee $OUT/bench.txt
el done
