#!/usr/bin/env bash
# Session 44, call 7: keys by warp in the i8 split decode kernel (HF2Q_SPLIT_WARP_KEYS=1, branch
# wip/warp-keys) against the same tree without it, built in the same call: DISABLED_Perf's i8 decode
# rows, then the attention suite's i8 instances on the variant.
#   mkdir -p $OUT && OUT=$OUT bash out/s44f.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
build() {  # build DIR CUDA_FLAGS
  ( cmake -S . -B $1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON "-DCMAKE_CUDA_FLAGS=$2" > /tmp/cfg-$1.log 2>&1 &&
    cmake --build $1 -j16 --target test_cuda_attention > /tmp/build-$1.log 2>&1; echo "$1 rc=$?"
    grep -B2 -A10 " error" /tmp/build-$1.log | head -30 )
}
build build-gpu "" & build build-wk "-DHF2Q_SPLIT_WARP_KEYS=1" &
wait
el built
for d in build-gpu build-wk build-gpu build-wk; do
  timeout 40 $d/bin/test_cuda_attention --gtest_also_run_disabled_tests \
    --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/i8" 2>&1 | grep -E "decode" | grep -v generic | sed "s/^/$d /"
done | tee $OUT/perf.txt
el perf
t attention-wk 90 build-wk/bin/test_cuda_attention --gtest_filter='Cache/*/i8:-*DISABLED*'
el done
