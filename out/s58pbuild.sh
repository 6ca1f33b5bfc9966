#!/usr/bin/env bash
# s58pbuild.sh BUILD_DIR: the binaries out/s58p.sh carries (the experts' L2 prefetch, HF2Q_EXPERT_PREFETCH_MB in
# cuda_backend.cu), built here from this tree by flipping the default in place, packed into out/bin58p:
#   m    the tree's default (0: no prefetch)
#   p16  16 MiB of the experts' gate_up asked of L2 by the residual_norms before the router chain
#   p32  32 MiB
#   test_cuda_ops and test_model of p32 (the prefetch on in their CUDA runs).
# Commit first: the source is restored from a copy at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
F=src/backends/cuda/cuda_backend.cu
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
tmp=$(mktemp -d)
cp $F "$tmp/src.cu"
trap 'cp "$tmp/src.cu" $F; rm -rf "$tmp"' EXIT
setmb() { sed -i "s/^#define HF2Q_EXPERT_PREFETCH_MB [0-9]*\$/#define HF2Q_EXPERT_PREFETCH_MB $1/" $F
  grep -q "^#define HF2Q_EXPERT_PREFETCH_MB $1\$" $F || { echo "setmb $1"; exit 1; }; }
snap() { ninja -C "$B" hf2q > /dev/null; cp "$B/bin/hf2q" "$tmp/hf2q_$1"; echo "built $1"; }
snap m
setmb 16; snap p16
setmb 32; snap p32
ninja -C "$B" test_cuda_ops test_model hf2q_cupti_trace > /dev/null
for t in test_cuda_ops test_model; do cp "$B/bin/$t" "$tmp/$t"; done
mkdir -p out/bin58p
cp "$B/lib/libhf2q_cupti_trace.so" out/bin58p/
bash out/bundle.sh out/bin58p/bundle58p.tar.xz "$tmp"/hf2q_{m,p16,p32} "$tmp"/test_cuda_ops "$tmp"/test_model
