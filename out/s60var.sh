#!/usr/bin/env bash
# s60var.sh BUILD_DIR: test_cuda_ops of gemm_tile.cu's variants (ring slots, cluster size), flipped in place and
# restored, into out/bin60/ops_NAME.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:?build directory}
f=src/backends/cuda/gemm_tile.cu
cp $f /tmp/gemm_tile.cu.keep
trap 'cp /tmp/gemm_tile.cu.keep '"$f" EXIT
setdef() { sed -i "s/^#define $1 [0-9]*\$/#define $1 $2/" $f; grep -q "^#define $1 $2\$" $f || { echo "setdef $1 $2"; exit 1; }; }
snap() { ninja -C "$B" test_cuda_ops > /dev/null; cp "$B/bin/test_cuda_ops" out/bin60/ops_$1; echo "built $1"; }
snap s5
setdef HF2Q_TILE_SLOTS 8; snap s8
setdef HF2Q_TILE_SLOTS 5; setdef HF2Q_TILE_MAX_CLUSTER 1; snap s5c1
setdef HF2Q_TILE_SLOTS 8; snap s8c1
cp /tmp/gemm_tile.cu.keep $f; ninja -C "$B" test_cuda_ops > /dev/null
xz -T2 -1 -f out/bin60/ops_s5 out/bin60/ops_s8 out/bin60/ops_s5c1 out/bin60/ops_s8c1
ls -la out/bin60
