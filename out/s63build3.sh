#!/usr/bin/env bash
# s63build3.sh BUILD_DIR: the g binaries out/s63c.sh carries (out/bin63c/bundle63c.tar.xz): main with
# out/s63_prep.patch applied (session 63's change, not measured: the experts' gate_up input prepared once per token
# by residual_norms up to 64 tokens and read by the tensor-core GEMV through the grouping's gather;
# Backend::prepared_expert_down_tokens renamed prepared_expert_tokens), hf2q_g and the GPU test binaries *_g.
# The patch is taken off again at the end (also on failure). With out/s63build.sh's bin63 (e = main) and
# out/s63build2.sh's bin63b, out/s63c.sh runs g's tests and rows against e.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
git apply out/s63_prep.patch
tmp=$(mktemp -d)
trap 'git apply -R out/s63_prep.patch; rm -rf "$tmp"' EXIT
T=(test_cuda_ops test_model test_synth_engine test_generation)
ninja -C "$B" hf2q "${T[@]}" > /dev/null
cp "$B/bin/hf2q" "$tmp/hf2q_g"
for t in "${T[@]}"; do cp "$B/bin/$t" "$tmp/${t}_g"; done
mkdir -p out/bin63c
bash out/bundle.sh out/bin63c/bundle63c.tar.xz "$tmp"/*
