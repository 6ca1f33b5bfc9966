#!/usr/bin/env bash
# s62build.sh BUILD_DIR: the binaries out/s62a.sh carries, built on the CPU machine (sm_90a) from this tree in
# BUILD_DIR (a Release CUDA build directory, configured if new) by flipping defaults in place, packed by out/bundle.sh
# into out/bin62/bundle62.tar.xz (the flips by out/build_lib.sh):
#   d    main                                  m    no tile copies (HF2Q_TILE_COPY 0, weights.cpp)
#   x    main with the tile GEMM up to 64 tokens (cuda_backend.cu: MatmulEnv::tile_max_tokens 64)
#   w    x with 16-warp tile blocks (256 rows: HF2Q_TILE_WARPS 16, gemm_tile.cu)
#   w32  main with 16-warp tile blocks (the tile GEMM at 17-32 tokens, as main)
#   main's test binaries that run on a GPU, and test_cuda_ops at 16 warps (test_ops16).
# Commit first: the sources are restored from copies at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
W=src/models/gemma4/weights.cpp
G=src/backends/cuda/gemm_tile.cu
source out/build_lib.sh $W $G src/backends/cuda/cuda_backend.cu
T=(test_cuda_ops test_model test_synth_engine test_generation)
ninja -C "$B" hf2q "${T[@]}" > /dev/null
mkdir -p "$tmp/t"
for t in "${T[@]}"; do cp "$B/bin/$t" "$tmp/t/"; done
snap d
setdef $W HF2Q_TILE_COPY 0; snap m
restore
setdef $G HF2Q_TILE_WARPS 16; snap w32
ninja -C "$B" test_cuda_ops > /dev/null; cp "$B/bin/test_cuda_ops" "$tmp/t/test_ops16"
cap64; snap w
restore
cap64; snap x
restore
ninja -C "$B" hf2q "${T[@]}" > /dev/null
mkdir -p out/bin62
bash out/bundle.sh out/bin62/bundle62.tar.xz "$tmp"/hf2q_{d,m,x,w,w32} "$tmp"/t/test_*
