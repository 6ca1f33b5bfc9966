#!/usr/bin/env bash
# s60build.sh BUILD_DIR: the binaries out/s60d.sh carries, built on the CPU machine (sm_90a) from this tree in
# BUILD_DIR (a Release CUDA build directory, configured if new) by flipping HF2Q_TILE_COPY (weights.cpp) in place,
# then packed by out/bundle.sh into out/bin60/bundle60.tar.xz: m (0: no tile copies), t (1: the attention's),
# g (2: the dense MLP's), a (3: both), the test binaries of m that run on a GPU, and t's test_model (test_model_t).
# Commit first: the sources are restored from copies at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
tmp=$(mktemp -d)
files=(src/models/gemma4/weights.cpp)
for f in "${files[@]}"; do cp "$f" "$tmp/$(basename "$f")"; done
restore() { for f in "${files[@]}"; do cp "$tmp/$(basename "$f")" "$f"; done; rm -rf "$tmp"; }
trap restore EXIT
setdef() {  # setdef FILE NAME VALUE
  sed -i "s/^#define $2 [0-9]*\$/#define $2 $3/" "$1"; grep -q "^#define $2 $3\$" "$1" || { echo "setdef $2 $3"; exit 1; }
}
snap() { ninja -C "$B" hf2q > /dev/null; cp "$B/bin/hf2q" "$tmp/hf2q_$1"; echo "built $1"; }
ninja -C "$B" > /dev/null
mkdir -p "$tmp/t"
for t in test_cuda_ops test_model; do cp "$B/bin/$t" "$tmp/t/"; done
snap m
setdef src/models/gemma4/weights.cpp HF2Q_TILE_COPY 3; snap a
setdef src/models/gemma4/weights.cpp HF2Q_TILE_COPY 2; snap g
setdef src/models/gemma4/weights.cpp HF2Q_TILE_COPY 1; snap t
ninja -C "$B" test_model > /dev/null; cp "$B/bin/test_model" "$tmp/t/test_model_t"
setdef src/models/gemma4/weights.cpp HF2Q_TILE_COPY 0
ninja -C "$B" hf2q test_model > /dev/null
mkdir -p out/bin60
bash out/bundle.sh out/bin60/bundle60.tar.xz "$tmp"/hf2q_{m,t,g,a} "$tmp"/t/test_*
