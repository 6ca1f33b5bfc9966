# Shared by the CPU machine's bundle scripts from session 62 on (sourced, from the repository root, after B is set to
# a Release CUDA build directory): each script flips switch defaults in place, snaps hf2q as hf2q_NAME, and packs the
# snaps with out/bundle.sh. The flipped sources are copied first and put back on exit (and by restore).
#   B=DIR; source out/build_lib.sh FILE...    the files the script will flip
tmp=$(mktemp -d)
flipped=("$@")
for f in "${flipped[@]}"; do cp "$f" "$tmp/$(basename "$f")"; done
restore() { local f; for f in "${flipped[@]}"; do cp "$tmp/$(basename "$f")" "$f"; done; }
trap 'restore; rm -rf "$tmp"' EXIT
setdef() {  # setdef FILE NAME VALUE: the switch's default (#define NAME VALUE)
  sed -i "s/^#define $2 [0-9]*\$/#define $2 $3/" "$1"; grep -q "^#define $2 $3\$" "$1" || { echo "setdef $2 $3"; exit 1; }
}
cap64() {  # the tile GEMM up to 64 tokens (MatmulEnv::tile_max_tokens; CudaOptions::tile_gemm_max_tokens is 32)
  local c=src/backends/cuda/cuda_backend.cu
  sed -i 's/env_.tile_max_tokens = o.tile_gemm_max_tokens;/env_.tile_max_tokens = 64;/' $c
  grep -q "env_.tile_max_tokens = 64;" $c || { echo "cap64"; exit 1; }
}
snap() {  # snap NAME: hf2q rebuilt in B and copied to $tmp/hf2q_NAME
  ninja -C "$B" hf2q > /dev/null; cp "$B/bin/hf2q" "$tmp/hf2q_$1"; echo "built $1"
}
