#!/usr/bin/env bash
# Next session (prepared in session 43): 8 KiB chunks for the f16 pools too
# (HF2Q_SPLIT_HALF_CHUNK=8192; head size 256 then takes 72 registers, so about 6 blocks an SM
# instead of 3; head size 512 keeps 16-key chunks), against main built in the same call:
# DISABLED_Perf's f16 decode rows, the 64-sequence f16 row and tg128 (alternating), the
# attention suite's f16 instances on the variant.
#   mkdir -p $OUT && OUT=$OUT bash out/s44b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
build() {  # build DIR CUDA_FLAGS
  ( cmake -S . -B $1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON "-DCMAKE_CUDA_FLAGS=$2" > /tmp/cfg-$1.log 2>&1 &&
    cmake --build $1 -j16 --target hf2q test_cuda_attention > /tmp/build-$1.log 2>&1; echo "$1 rc=$?"
    grep -B2 -A10 " error" /tmp/build-$1.log | head -30 )
}
build build-gpu "" & build build-hc8 "-DHF2Q_SPLIT_HALF_CHUNK=8192" &
wait
el built
[ -f /tmp/g26.gguf ] || ( build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force \
    -o /tmp/g26.gguf > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
for d in build-gpu build-hc8; do
  timeout 60 $d/bin/test_cuda_attention --gtest_also_run_disabled_tests \
    --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/f16" 2>&1 | grep -E "decode" | grep -v generic | sed "s/^/$d /"
done | tee $OUT/perf.txt
wait
el perf
{ for i in 1 2; do
    for d in build-gpu build-hc8; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096; done
  done
  for d in build-gpu build-hc8; do b $d -p '' -n 128 -b 1 -r 2; done
} 2>&1 | tee $OUT/bench.txt
el bench
before 480 && t attention-hc8 90 build-hc8/bin/test_cuda_attention --gtest_filter='Cache/*/f16:-*DISABLED*'
el done
