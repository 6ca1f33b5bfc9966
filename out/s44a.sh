#!/usr/bin/env bash
# Next session's first A/B (prepared in session 43): the split decode attention kernel with
# 8 KiB chunks for the one-byte pools (HF2Q_SPLIT_BYTE_CHUNK=8192: i8 at head size 256 takes
# 80 registers instead of 114, so about 6 blocks an SM instead of 3) and with the score tile's
# MMAs in two chains (HF2Q_SPLIT_SCORE_CHAINS=2), each against main built in the same call:
# DISABLED_Perf's decode rows (i8, f16), the 64-sequence rows (int8 and f16, alternating), and
# the attention suite on each variant.
#   mkdir -p $OUT && OUT=$OUT bash out/s44a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
build() {  # build DIR CUDA_FLAGS
  ( cmake -S . -B $1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON "-DCMAKE_CUDA_FLAGS=$2" > /tmp/cfg-$1.log 2>&1 &&
    cmake --build $1 -j16 --target hf2q test_cuda_attention > /tmp/build-$1.log 2>&1; echo "$1 rc=$?"
    grep -B2 -A10 " error" /tmp/build-$1.log | head -30 )
}
build build-gpu "" & build build-ck8 "-DHF2Q_SPLIT_BYTE_CHUNK=8192" & build build-ch2 "-DHF2Q_SPLIT_SCORE_CHAINS=2" &
wait
el built
( build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
for kv in i8 f16; do
  for d in build-gpu build-ck8 build-ch2; do
    [ $kv = f16 ] && [ $d = build-ck8 ] && continue  # the chunk switch leaves f16 pools as they are
    timeout 60 $d/bin/test_cuda_attention --gtest_also_run_disabled_tests \
      --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/$kv" 2>&1 | grep -E "decode (64|1 seq @(1000|32768), D=512)" |
      grep -v generic | sed "s/^/$kv $d /"
  done
done | tee $OUT/perf.txt
wait
el perf
{ for i in 1 2; do
    for d in build-gpu build-ck8 build-ch2; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type int8; done
  done
  for d in build-gpu build-ch2; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096; done
} 2>&1 | tee $OUT/bench.txt
el bench
before 420 && t attention-ck8 80 build-ck8/bin/test_cuda_attention --gtest_filter='Cache/*:-*DISABLED*:Cache/*/f32:Cache/*/f16'
before 500 && t attention-ch2 80 build-ch2/bin/test_cuda_attention --gtest_filter='Cache/*:-*DISABLED*'
el done
