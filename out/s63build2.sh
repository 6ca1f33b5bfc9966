#!/usr/bin/env bash
# s63build2.sh BUILD_DIR: the H200 binaries out/s63b.sh carries beside out/bin63 (out/bin63b/bundle63b.tar.xz),
# flipped in place (out/build_lib.sh): n Q5_0's lane copy off (HF2Q_GEMV_MMA_Q50_LANES 0, gemv_mma_switches.h);
# f the i8 score fold on (HF2Q_SPLIT_I8_FOLD 1, attention_split.cu). Main (e) and no tile copies (m) come from bin63.
# Commit first: the sources are restored from copies at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
S=src/backends/cuda/gemv_mma_switches.h
A=src/backends/cuda/attention_split.cu
source out/build_lib.sh $S $A
setdef $S HF2Q_GEMV_MMA_Q50_LANES 0; snap n
restore
setdef $A HF2Q_SPLIT_I8_FOLD 1; snap f
restore
ninja -C "$B" hf2q > /dev/null
mkdir -p out/bin63b
bash out/bundle.sh out/bin63b/bundle63b.tar.xz "$tmp"/hf2q_{n,f}
