#!/usr/bin/env bash
# s62build4.sh BUILD_DIR: the binaries out/s62e.sh carries (out/bin62e/bundle62e.tar.xz), flipped in place as
# out/s62build.sh does: e main; s2 at most two tile blocks an SM (HF2Q_TILE_MAX_BLOCKS_PER_SM 2, gemm_tile.cu; three
# fit at 32 tokens); test_cuda_ops at s2 (test_ops_s2).
# Commit first: the sources are restored from copies at the end, but an interrupted run leaves a flip behind.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
tmp=$(mktemp -d)
G=src/backends/cuda/gemm_tile.cu
cp $G "$tmp/"
trap 'cp "$tmp/$(basename $G)" $G; rm -rf "$tmp"' EXIT
snap() { ninja -C "$B" hf2q > /dev/null; cp "$B/bin/hf2q" "$tmp/hf2q_$1"; echo "built $1"; }
snap e
sed -i "s/^#define HF2Q_TILE_MAX_BLOCKS_PER_SM 0\$/#define HF2Q_TILE_MAX_BLOCKS_PER_SM 2/" $G
grep -q "^#define HF2Q_TILE_MAX_BLOCKS_PER_SM 2$" $G || { echo "setdef"; exit 1; }
snap s2
ninja -C "$B" test_cuda_ops > /dev/null; cp "$B/bin/test_cuda_ops" "$tmp/test_ops_s2"
cp "$tmp/$(basename $G)" $G
ninja -C "$B" hf2q test_cuda_ops > /dev/null
mkdir -p out/bin62e
bash out/bundle.sh out/bin62e/bundle62e.tar.xz "$tmp"/hf2q_{e,s2} "$tmp"/test_ops_s2
