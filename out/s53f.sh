#!/usr/bin/env bash
# For session 53 (branch wip/s53-q4k): the Q4_K experts' scaled copy (gemv_mma.h; ops::Backend::expert_layout),
# from binaries built on the CPU machine (sm_90a, stripped) and carried in out/bin53:
#   run(carry=["out/bin53x"]): mkdir -p $OUT && OUT=$OUT bash out/s53f.sh
# The copy's tests and the expert GEMV's neighbours, memcheck, test_model's CUDA cases; then the A/B in one
# binary, the copy (default) against --no-expert-copy: 64 sequences int8 alternating, twice; 32 sequences
# int8; 64 f16; racecheck last. About 7.5 minutes at most.
cd "$(dirname "$0")/.."
source out/device_lib.sh
B=out/bin53
if [ ! -x $B/hf2q ]; then  # carried xz-compressed (out/bin53x), under the carry limit
  mkdir -p $B && for f in out/bin53x/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
fi
$B/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf > /tmp/synth.log 2>&1 &
t ops 120 $B/test_cuda_ops --gtest_filter='*ExpertScaled*:*ExpertGeglu*:*GroupedIntegerGemvPassBoundaries*:*GroupedGeglu*'
wait
el synth; tail -2 /tmp/synth.log
bb() {  # bb ARGS...: one bench line of the carried hf2q on /tmp/g26.gguf (the tokens/s columns)
  echo "$* :: $(timeout 100 $B/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 |
    grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
}
{ for i in 1 2; do
    for x in "" --no-expert-copy; do
      before 330 && bb -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8 $x
    done
  done
} 2>&1 | tee $OUT/bench.txt
before 360 && t model 120 $B/test_model --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*'
before 370 && { timeout 60 $B/test_cuda_ops --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MoeThroughput*' \
  2>&1 | grep "perf \] moe" | grep -E "T=   64|T=  512" | grep -v "host offsets" | tee $OUT/moe.txt; }
before 390 && { timeout 60 compute-sanitizer --tool memcheck --error-exitcode 1 $B/test_cuda_ops \
  --gtest_filter='*ExpertScaled*' > /tmp/memcheck.log 2>&1; echo "memcheck rc=$?"; grep "ERROR SUMMARY" /tmp/memcheck.log | tail -1; }
{ for x in "" --no-expert-copy; do before 420 && bb -p '' -n 32 -b 32 -d 1024 -r 2 -ub 4096 --cache-type int8 $x; done
  for x in "" --no-expert-copy; do before 440 && bb -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type f16 $x; done
} 2>&1 | tee -a $OUT/bench.txt
before 450 && { timeout 40 compute-sanitizer --tool racecheck --error-exitcode 1 $B/test_cuda_ops \
  --gtest_filter='*ExpertScaledLayoutMatchesItsReference*' > /tmp/racecheck.log 2>&1; echo "racecheck rc=$?";
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" /tmp/racecheck.log | tail -1; }
el done
