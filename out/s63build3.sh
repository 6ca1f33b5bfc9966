#!/usr/bin/env bash
# s63build3.sh BUILD_DIR: every binary out/s63c.sh and out/s63b.sh carry but session 61's (out/bin63c/bundle63c.tar.xz):
#   e   main                                 m   main without tile copies (HF2Q_TILE_COPY 0, weights.cpp)
#   g   main with out/s63_prep.patch applied (session 63's change, not measured: the experts' gate_up input prepared
#       once per token by residual_norms up to 64 tokens and read by the tensor-core GEMV through the grouping's
#       gather; Backend::prepared_expert_down_tokens renamed prepared_expert_tokens), with g's GPU test binaries *_g.
# The flips and the patch are taken off again at the end (also on failure). out/s63build2.sh builds n and f (bin63b).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
W=src/models/gemma4/weights.cpp
source out/build_lib.sh $W
snap e
setdef $W HF2Q_TILE_COPY 0; snap m
restore
patched=0
trap '[ $patched = 1 ] && git apply -R out/s63_prep.patch; restore; rm -rf "$tmp"' EXIT
git apply out/s63_prep.patch; patched=1
T=(test_cuda_ops test_model test_synth_engine test_generation)
ninja -C "$B" hf2q "${T[@]}" > /dev/null
cp "$B/bin/hf2q" "$tmp/hf2q_g"
for t in "${T[@]}"; do cp "$B/bin/$t" "$tmp/${t}_g"; done
mkdir -p out/bin63c
bash out/bundle.sh out/bin63c/bundle63c.tar.xz "$tmp"/hf2q_{e,m,g} "$tmp"/test_*_g
