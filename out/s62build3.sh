#!/usr/bin/env bash
# s62build3.sh BUILD_DIR: the binaries out/s62d.sh carries (out/bin62d/bundle62d.tar.xz), flipped in place
# (out/build_lib.sh): d main; c4 clusters of at most 4 (HF2Q_TILE_MAX_CLUSTER 4, gemm_tile.cu: o, K = 4,096, in 88
# blocks of 16 chunks instead of 176 of 8, one wave at one block an SM); x and x4 the same up to 64 tokens;
# test_cuda_ops at c4 (test_ops4c).
# Commit first: the sources are restored from copies at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
G=src/backends/cuda/gemm_tile.cu
source out/build_lib.sh $G src/backends/cuda/cuda_backend.cu
ninja -C "$B" hf2q test_cuda_ops > /dev/null
mkdir -p "$tmp/t"
cp "$B/bin/test_cuda_ops" "$tmp/t/"
snap d
setdef $G HF2Q_TILE_MAX_CLUSTER 4; snap c4
ninja -C "$B" test_cuda_ops > /dev/null; cp "$B/bin/test_cuda_ops" "$tmp/t/test_ops4c"
cap64; snap x4
restore
cap64; snap x
restore
ninja -C "$B" hf2q test_cuda_ops > /dev/null
mkdir -p out/bin62d
bash out/bundle.sh out/bin62d/bundle62d.tar.xz "$tmp"/hf2q_{d,c4,x,x4} "$tmp"/t/test_*
