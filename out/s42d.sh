#!/usr/bin/env bash
# Session 42's hypothesis (1) for the small GEMM's loss, in one call: main as it is (the
# small GEMM off) against the small GEMM on with splits aiming at two blocks an SM (as
# measured) and at one (HF2Q_SMALL_GEMM_WAVE=1: half the SMs' room left to the experts'
# stream), 64 sequences with the f16 and int8 caches. Three builds of this tree. (On main the
# layers' Q6_K matrices have no planes, so they stay on cuBLAS: session 42's measured build
# had them; wip/small-gemm adds them.)
#   mkdir -p $OUT && OUT=$OUT bash out/s42d.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name --format=csv,noheader
build() {  # build DIR CUDA_FLAGS
  ( cmake -S . -B $1 -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON "-DCMAKE_CUDA_FLAGS=$2" > /tmp/cfg-$1.log 2>&1 &&
    cmake --build $1 -j16 --target hf2q > /tmp/build-$1.log 2>&1; echo "$1 rc=$?" )
}
build build-off "" & build build-w2 "-DHF2Q_SMALL_GEMM=1" & build build-w1 "-DHF2Q_SMALL_GEMM=1 -DHF2Q_SMALL_GEMM_WAVE=1" &
wait
el built
build-off/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf > /dev/null 2>&1
b() {
  local d=$1; shift
  echo "$d $* :: $(timeout 150 $d/bin/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 |
    grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
}
{ for c in "" "--cache-type int8"; do
    for d in build-off build-w2 build-w1; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 $c; done
  done
  for d in build-off build-w2 build-w1; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096; done
} 2>&1 | tee $OUT/bench.txt
el done
