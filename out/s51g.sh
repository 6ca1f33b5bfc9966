#!/usr/bin/env bash
# Session 51, third call (branch wip/s51-all after out/s51e.sh and s51f.sh): the batched router
# kernel capped at 32 tokens (HF2Q_BATCH_ROUTER_MAX_TOKENS), the last-block grouping off, the
# attention's BF16 rows on, a matmul ignoring BF16 rows below 16-byte alignment. Built once
# (new), then by one-object rebuilds: bf (no batch router), base (neither: main's behaviour).
# Tests and racecheck (its report kept) beside the rebuilds; then int8 rows at 17, 32 and 64
# sequences, while younger than 520 s. ~6 minutes.
#   git checkout wip/s51-all && mkdir -p $OUT && OUT=$OUT bash out/s51g.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
rm -rf build-v
variant build-gpu "" hf2q test_cuda_ops test_cuda_attention test_model
el built
( [ -s /tmp/g26.gguf ] || synth_g26
  passes ops 300 build-gpu/bin/test_cuda_ops --gtest_filter='*Moe*:*Router*:*Geglu*:*Prepared*'
  passes attn 300 build-gpu/bin/test_cuda_attention \
    --gtest_filter='*Bf16Output*:*PreparedOutput*:Cache/*/i8:Cache/*/e4m3:*SplitPlan*:-*DISABLED*'
  passes model 300 build-gpu/bin/test_model --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*:*Argmax*'
  timeout 200 compute-sanitizer --tool racecheck --error-exitcode 1 --print-limit 20 \
    build-gpu/bin/test_cuda_attention --gtest_filter='Cache/CudaAttentionKv.Bf16Output/f16' > $OUT/racecheck.txt 2>&1
  echo "racecheck rc=$?"; grep -E "RACECHECK SUMMARY" $OUT/racecheck.txt | tail -1
  grep -E "^=========     at .*in " $OUT/racecheck.txt | sed 's/0x[0-9a-f]*//g' | sort | uniq -c | head -8
  sanitize 400 100 build-gpu/bin/test_cuda_ops '*MoeRouterRouteGroupReplays*'
  el tested ) > $OUT/tests.txt 2>&1 &
mkdir -p build-v/new/bin && cp build-gpu/bin/hf2q build-v/new/bin/
setdef moe.cu HF2Q_BATCH_ROUTER 0 && snap bf
setdef attention.cu HF2Q_ATTN_BF16_ROWS 0 && snap base
wait
cat $OUT/tests.txt
{ for n in 32 17 64 32; do
    for v in base bf new; do before 520 && b build-v/$v -p '' -n 32 -b $n -d 1024 -r 2 -ub 4096 --cache-type int8; done
  done
} 2>&1 | tee $OUT/bench.txt
el done
