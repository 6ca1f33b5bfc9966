#!/usr/bin/env bash
# s57build.sh BUILD_DIR: the binaries out/s57a.sh and s57b.sh carry, built on the CPU machine (sm_90a) from this
# tree in BUILD_DIR (a Release CUDA build directory, configured if new) by flipping switch defaults in place,
# then packed by out/bundle.sh into out/bin57x/bundle57.tar.xz (with the CUPTI trace library beside it):
#   o      the tree's defaults (Q5_0's lane copy and the i8 score fold off)
#   lanes  HF2Q_GEMV_MMA_Q50_LANES 1 (gemv_mma_switches.h)
#   fold   lanes and HF2Q_SPLIT_I8_FOLD 1 (attention_split.cu)
#   e      o with HF2Q_GEMV_MMA_DS_ODD 0 (the pairs' stride before session 55)
#   test_cuda_ops, test_model and test_cuda_attention of fold (so the copy's tests assert, not skip).
# The sources are restored from their copies at the end (uncommitted edits to those three files are kept).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
S=src/backends/cuda
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
tmp=$(mktemp -d)
files=($S/gemv_mma_switches.h $S/attention_split.cu $S/gemv_mma.cu)
for f in "${files[@]}"; do cp "$f" "$tmp/$(basename "$f")"; done
restore() { for f in "${files[@]}"; do cp "$tmp/$(basename "$f")" "$f"; done; rm -rf "$tmp"; }
trap restore EXIT
setdef() {  # setdef FILE NAME VALUE
  sed -i "s/^#define $2 [0-9]*\$/#define $2 $3/" "$1"; grep -q "^#define $2 $3\$" "$1" || { echo "setdef $2 $3"; exit 1; }
}
snap() { ninja -C "$B" hf2q > /dev/null; cp "$B/bin/hf2q" "$tmp/hf2q_$1"; echo "built $1"; }
snap o
setdef $S/gemv_mma.cu HF2Q_GEMV_MMA_DS_ODD 0; snap e; setdef $S/gemv_mma.cu HF2Q_GEMV_MMA_DS_ODD 1
setdef $S/gemv_mma_switches.h HF2Q_GEMV_MMA_Q50_LANES 1; snap lanes
setdef $S/attention_split.cu HF2Q_SPLIT_I8_FOLD 1; snap fold
ninja -C "$B" test_cuda_ops test_model test_cuda_attention hf2q_cupti_trace > /dev/null
for t in test_cuda_ops test_model test_cuda_attention; do cp "$B/bin/$t" "$tmp/$t"; done
mkdir -p out/bin57x
cp "$B/lib/libhf2q_cupti_trace.so" out/bin57x/
bash out/bundle.sh out/bin57x/bundle57.tar.xz "$tmp"/hf2q_{fold,lanes,o,e} "$tmp"/test_cuda_{ops,attention} \
  "$tmp"/test_model
