#!/usr/bin/env bash
# s58build.sh BUILD_DIR: the binaries out/s58b.sh carries, built on the CPU machine (sm_90a) from this tree in
# BUILD_DIR (a Release CUDA build directory, configured if new) by flipping switch defaults in place, then packed by
# out/bundle.sh into out/bin58/bundle58.tar.xz (with the CUPTI trace library beside it):
#   m      the tree's defaults (Q5_0's lane copy on since session 58, the i8 score fold off)
#   n      HF2Q_GEMV_MMA_Q50_LANES 0 (gemv_mma_switches.h): main before session 58
#   f      m with HF2Q_SPLIT_I8_FOLD 1 (attention_split.cu)
#   the test binaries of m that run on a GPU (test_cuda_*, test_model, test_profiling, test_generation,
#   test_synth_engine).
# Commit first: the sources are restored from copies at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
S=src/backends/cuda
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
tmp=$(mktemp -d)
files=($S/gemv_mma_switches.h $S/attention_split.cu)
for f in "${files[@]}"; do cp "$f" "$tmp/$(basename "$f")"; done
restore() { for f in "${files[@]}"; do cp "$tmp/$(basename "$f")" "$f"; done; rm -rf "$tmp"; }
trap restore EXIT
setdef() {  # setdef FILE NAME VALUE
  sed -i "s/^#define $2 [0-9]*\$/#define $2 $3/" "$1"; grep -q "^#define $2 $3\$" "$1" || { echo "setdef $2 $3"; exit 1; }
}
snap() { ninja -C "$B" hf2q > /dev/null; cp "$B/bin/hf2q" "$tmp/hf2q_$1"; echo "built $1"; }
ninja -C "$B" > /dev/null
mkdir -p "$tmp/t"
for t in test_cuda_ops test_cuda_attention test_cuda_sampling test_model test_profiling test_generation \
  test_synth_engine; do cp "$B/bin/$t" "$tmp/t/"; done
snap m
setdef $S/gemv_mma_switches.h HF2Q_GEMV_MMA_Q50_LANES 0; snap n; setdef $S/gemv_mma_switches.h HF2Q_GEMV_MMA_Q50_LANES 1
setdef $S/attention_split.cu HF2Q_SPLIT_I8_FOLD 1; snap f
mkdir -p out/bin58
ninja -C "$B" hf2q_cupti_trace > /dev/null && cp "$B/lib/libhf2q_cupti_trace.so" out/bin58/
bash out/bundle.sh out/bin58/bundle58.tar.xz "$tmp"/hf2q_{m,n,f} "$tmp"/t/test_*
