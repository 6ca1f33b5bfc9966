#!/usr/bin/env bash
# Session 47: KV blocks head-major (-DHF2Q_KV_HEAD_MAJOR=1 for C++ and CUDA: a block's rows of
# one KV head contiguous, [n_kv_heads][block_size][head_dim], and the i8 scales likewise) against
# main built in the same call (build-gpu, kept if a warm machine already has it). Why: the
# keys-by-warp kernel reads 256-byte runs of an i8 pool at 2 KiB strides; out/pool_probe.cu
# measures the layouts alone (first, seconds). Then 64 sequences int8, fp8, f16 and int8 again
# alternating, then the variant's GPU suites (attention, the KV stores and attention inputs) and
# memcheck while time is left (device minutes were short: one call for all).
#   mkdir -p $OUT && OUT=$OUT bash out/s47b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
[ -f $OUT/probe.txt ] || pool_probe
T="hf2q test_cuda_attention test_cuda_ops"
if [ -x build-gpu/bin/hf2q ]; then more build-gpu hf2q & else variant build-gpu "" hf2q & fi
variant_all build-hm -DHF2Q_KV_HEAD_MAJOR=1 $T &
[ -f /tmp/g26.gguf ] || ( for i in $(seq 80); do [ -x build-gpu/bin/hf2q ] && break; sleep 5; done
  build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
wait
el built
# Benches first (device minutes were short), then the variant's tests while time is left.
{ for c in int8 fp8 f16 int8; do
    for d in build-gpu build-hm; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type $c; done
  done
} 2>&1 | tee $OUT/bench.txt
el benched
before 500 && t attention-hm 120 build-hm/bin/test_cuda_attention --gtest_filter='-*DISABLED*'
before 540 && t ops-hm 50 build-hm/bin/test_cuda_ops --gtest_filter='*KvStore*:*AttentionInputs*'
before 540 && sanitize 560 40 build-hm/bin/test_cuda_attention 'Cache/CudaAttentionKv.DecodeWithEarlierKeysStored/i8'
el done
