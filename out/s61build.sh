#!/usr/bin/env bash
# s61build.sh BUILD_DIR: the binaries out/s61b.sh carries, built on the CPU machine (sm_90a) from this tree in
# BUILD_DIR (a Release CUDA build directory, configured if new) by flipping switch defaults in place, packed by
# out/bundle.sh into out/bin61/bundle61.tar.xz:
#   m    no tile copies (HF2Q_TILE_COPY 0, weights.cpp)       g    the dense MLP's (2)
#   t    the attention's (1)                                  a    both (3: main's default since session 61)
#   t4, a4   t and a with 64-row tile blocks (HF2Q_TILE_WARPS 4, gemm_tile.cu)
#   The copies are read at 17-32 tokens (CudaOptions::tile_gemm_max_tokens' default): the bundle this script built
#   at 7da271f read them up to 64 and had a32 for what a is now.
#   n    Q5_0's lane copy off (HF2Q_GEMV_MMA_Q50_LANES 0, gemv_mma_switches.h; on since session 58, H100 only)
#   f    the i8 score fold on (HF2Q_SPLIT_I8_FOLD 1, attention_split.cu; never run on an H200)
#   the test binaries of the tree's defaults that run on a GPU, t's test_model (test_model_t), and test_cuda_ops at
#   4 warps (ops4: its matmul rows; its LayoutSizeAndPadding expects 128-row tiles and fails there).
# Commit first: the sources are restored from copies at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
tmp=$(mktemp -d)
W=src/models/gemma4/weights.cpp
G=src/backends/cuda/gemm_tile.cu
N=src/backends/cuda/gemv_mma_switches.h
F=src/backends/cuda/attention_split.cu
files=($W $G $N $F)
for f in "${files[@]}"; do cp "$f" "$tmp/$(basename "$f")"; done
restore() { for f in "${files[@]}"; do cp "$tmp/$(basename "$f")" "$f"; done; }
trap 'restore; rm -rf "$tmp"' EXIT
setdef() {  # setdef FILE NAME VALUE
  sed -i "s/^#define $2 [0-9]*\$/#define $2 $3/" "$1"; grep -q "^#define $2 $3\$" "$1" || { echo "setdef $2 $3"; exit 1; }
}
snap() { ninja -C "$B" hf2q > /dev/null; cp "$B/bin/hf2q" "$tmp/hf2q_$1"; echo "built $1"; }
ninja -C "$B" > /dev/null
mkdir -p "$tmp/t"
for t in test_cuda_ops test_model; do cp "$B/bin/$t" "$tmp/t/"; done
setdef $W HF2Q_TILE_COPY 0; snap m
setdef $W HF2Q_TILE_COPY 2; snap g
setdef $W HF2Q_TILE_COPY 3; snap a
setdef $W HF2Q_TILE_COPY 1; snap t
ninja -C "$B" test_model > /dev/null; cp "$B/bin/test_model" "$tmp/t/test_model_t"
setdef $G HF2Q_TILE_WARPS 4; snap t4
setdef $W HF2Q_TILE_COPY 3; snap a4
ninja -C "$B" test_cuda_ops > /dev/null; cp "$B/bin/test_cuda_ops" "$tmp/t/test_ops4"
restore
setdef $N HF2Q_GEMV_MMA_Q50_LANES 0; snap n
restore
setdef $F HF2Q_SPLIT_I8_FOLD 1; snap f
restore
ninja -C "$B" hf2q test_model test_cuda_ops > /dev/null
mkdir -p out/bin61
bash out/bundle.sh out/bin61/bundle61.tar.xz "$tmp"/hf2q_{m,t,g,a,t4,a4,n,f} "$tmp"/t/test_*
