#!/usr/bin/env bash
# Obsolete after 0831366 (the two gemm_tile.cu switches it flips are gone): it built the bundle out/s63a.sh ran, at 16d2d7d.
# s63build.sh BUILD_DIR: the binaries out/s63a.sh carries (out/bin63/bundle63.tar.xz), flipped in place
# (out/build_lib.sh): session 62's s62build4 set in one bundle with main's no-copies build, for a machine reset
# since: e main; m no tile copies (HF2Q_TILE_COPY 0, weights.cpp); s2 at most two tile blocks an SM
# (HF2Q_TILE_MAX_BLOCKS_PER_SM 2, gemm_tile.cu); x main with the tile GEMM up to 64 tokens (MatmulEnv::tile_max_tokens
# 64); x3 x with three blocks an SM at 64 tokens (HF2Q_TILE_MIN_BLOCKS 3); xa, xa3: x, x3 with tile copies of the
# attention only (HF2Q_TILE_COPY 1: the dense MLP, beside the experts on the side stream, stays on cuBLAS); test_cuda_ops
# of main (test_ops_e), at s2 (test_ops_s2) and at 3 blocks (test_ops_r3).
# Commit first: the sources are restored from copies at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
G=src/backends/cuda/gemm_tile.cu
W=src/models/gemma4/weights.cpp
source out/build_lib.sh $G $W src/backends/cuda/cuda_backend.cu
ninja -C "$B" hf2q test_cuda_ops > /dev/null; cp "$B/bin/test_cuda_ops" "$tmp/test_ops_e"
snap e
setdef $W HF2Q_TILE_COPY 0; snap m
restore
setdef $G HF2Q_TILE_MAX_BLOCKS_PER_SM 2; snap s2
ninja -C "$B" test_cuda_ops > /dev/null; cp "$B/bin/test_cuda_ops" "$tmp/test_ops_s2"
restore
setdef $G HF2Q_TILE_MIN_BLOCKS 3
ninja -C "$B" test_cuda_ops > /dev/null; cp "$B/bin/test_cuda_ops" "$tmp/test_ops_r3"
cap64; snap x3
setdef $W HF2Q_TILE_COPY 1; snap xa3
restore
cap64; snap x
setdef $W HF2Q_TILE_COPY 1; snap xa
restore
ninja -C "$B" hf2q test_cuda_ops > /dev/null
mkdir -p out/bin63
bash out/bundle.sh out/bin63/bundle63.tar.xz "$tmp"/hf2q_{e,m,s2,x,x3,xa,xa3} "$tmp"/test_ops_{e,s2,r3}
