#!/usr/bin/env bash
# Prepared in session 45: the keys-by-warp kernel's early fetch (HF2Q_SPLIT_WARP_FETCH_EARLY=1), and
# with it E4M3 at the 4-chunk floor (HF2Q_SPLIT_WARP_MIN_CHUNKS_E4M3=4), against main built in the
# same call: the promise test and the 8-bit attention grids on both variants first (a variant that
# fails is not benched), then int8 and fp8 decode at 64 and 8 sequences (alternating) and fp8 at 16.
# out/s46d.sh then runs the sanitizers and the model's decode tests on the same warm machine.
#   mkdir -p $OUT && OUT=$OUT bash out/s46c.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-gpu "" hf2q test_cuda_attention &
variant build-fe "-DHF2Q_SPLIT_WARP_FETCH_EARLY=1" hf2q test_cuda_attention &
variant build-fe4 "-DHF2Q_SPLIT_WARP_FETCH_EARLY=1 -DHF2Q_SPLIT_WARP_MIN_CHUNKS_E4M3=4" hf2q test_cuda_attention &
wait
el built
( build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
ok=()
for d in build-fe build-fe4; do
  passes attention-${d#build-} 120 $d/bin/test_cuda_attention \
    --gtest_filter='Cache/*/i8:Cache/*/e4m3:*SplitPlan*:-*DISABLED*' && ok+=($d)
done
echo "benched: build-gpu ${ok[*]}"
wait
el tested
{ ab64 build-gpu "${ok[@]}"
  for c in int8 fp8; do
    for d in build-gpu "${ok[@]}"; do b $d -p '' -n 32 -b 8 -d 1024 -r 2 -ub 4096 --cache-type $c; done
  done
  for d in build-gpu "${ok[@]}"; do b $d -p '' -n 32 -b 16 -d 1024 -r 2 -ub 4096 --cache-type fp8; done
} 2>&1 | tee $OUT/bench.txt
el done
