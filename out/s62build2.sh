#!/usr/bin/env bash
# s62build2.sh BUILD_DIR: the binaries out/s62b.sh carries (out/bin62b/bundle62b.tar.xz), flipped in place as
# out/s62build.sh does:
#   d    main (the tile GEMM as before, at 17-32 tokens)      x    d up to 64 tokens (MatmulEnv::tile_max_tokens 64)
#   p    the producer form (HF2Q_TILE_PRODUCER 1, gemm_tile.cu) px   p up to 64 tokens
#   main's test_cuda_ops and test_model, and both with the producer form (test_opsP, test_modelP).
# The producer form is in 493b152 only (removed after session 62 measured it); build this script there.
# Commit first: the sources are restored from copies at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
[ -f "$B/build.ninja" ] || cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON > /dev/null
tmp=$(mktemp -d)
G=src/backends/cuda/gemm_tile.cu
C=src/backends/cuda/cuda_backend.cu
files=($G $C)
for f in "${files[@]}"; do cp "$f" "$tmp/$(basename "$f")"; done
restore() { for f in "${files[@]}"; do cp "$tmp/$(basename "$f")" "$f"; done; }
trap 'restore; rm -rf "$tmp"' EXIT
setdef() {  # setdef FILE NAME VALUE
  sed -i "s/^#define $2 [0-9]*\$/#define $2 $3/" "$1"; grep -q "^#define $2 $3\$" "$1" || { echo "setdef $2 $3"; exit 1; }
}
cap64() {
  sed -i 's/env_.tile_max_tokens = o.tile_gemm_max_tokens;/env_.tile_max_tokens = 64;/' $C
  grep -q "env_.tile_max_tokens = 64;" $C || { echo "cap64"; exit 1; }
}
snap() { ninja -C "$B" hf2q > /dev/null; cp "$B/bin/hf2q" "$tmp/hf2q_$1"; echo "built $1"; }
T=(test_cuda_ops test_model)
ninja -C "$B" hf2q "${T[@]}" > /dev/null
mkdir -p "$tmp/t"
for t in "${T[@]}"; do cp "$B/bin/$t" "$tmp/t/"; done
snap d
setdef $G HF2Q_TILE_PRODUCER 1; snap p
ninja -C "$B" "${T[@]}" > /dev/null
cp "$B/bin/test_cuda_ops" "$tmp/t/test_opsP"; cp "$B/bin/test_model" "$tmp/t/test_modelP"
cap64; snap px
restore
cap64; snap x
restore
ninja -C "$B" hf2q "${T[@]}" > /dev/null
mkdir -p out/bin62b
bash out/bundle.sh out/bin62b/bundle62b.tar.xz "$tmp"/hf2q_{d,x,p,px} "$tmp"/t/test_*
