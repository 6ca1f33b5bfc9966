#!/usr/bin/env bash
# s62build4.sh BUILD_DIR: the binaries out/s62e.sh carries (out/bin62e/bundle62e.tar.xz), flipped in place
# (out/build_lib.sh): e main; s2 at most two tile blocks an SM (HF2Q_TILE_MAX_BLOCKS_PER_SM 2, gemm_tile.cu; three
# fit at 32 tokens); x main with the tile GEMM up to 64 tokens (MatmulEnv::tile_max_tokens 64); x3 x with three blocks
# an SM at 64 tokens (HF2Q_TILE_MIN_BLOCKS 3: 74 registers); test_cuda_ops at s2 (test_ops_s2) and at 3 blocks
# (test_ops_r3).
# Commit first: the sources are restored from copies at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
G=src/backends/cuda/gemm_tile.cu
source out/build_lib.sh $G src/backends/cuda/cuda_backend.cu
snap e
setdef $G HF2Q_TILE_MAX_BLOCKS_PER_SM 2; snap s2
ninja -C "$B" test_cuda_ops > /dev/null; cp "$B/bin/test_cuda_ops" "$tmp/test_ops_s2"
restore
setdef $G HF2Q_TILE_MIN_BLOCKS 3
ninja -C "$B" test_cuda_ops > /dev/null; cp "$B/bin/test_cuda_ops" "$tmp/test_ops_r3"
cap64; snap x3
restore
cap64; snap x
restore
ninja -C "$B" hf2q test_cuda_ops > /dev/null
mkdir -p out/bin62e
bash out/bundle.sh out/bin62e/bundle62e.tar.xz "$tmp"/hf2q_{e,s2,x,x3} "$tmp"/test_ops_{s2,r3}
