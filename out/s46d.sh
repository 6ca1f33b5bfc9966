#!/usr/bin/env bash
# After out/s46c.sh on the same warm machine: the sanitizers on the promise test and the many-
# sequence decode (8-bit pools) with the warp kernel's early fetch; then whether the key at pos
# is read after the previous kernel stores it: the model fixtures' head sizes (64, 128) never
# take the warp kernel, so 64 greedy requests of 500-800 random ids on the synthetic 26B-A4B
# (int8 and fp8 caches: the warp kernel on its sliding layers) must give main's ids exactly
# (main run twice: the baseline's own run-to-run identity); and the model's decode tests.
#   mkdir -p $OUT && OUT=$OUT bash out/s46d.sh [build-fe|build-fe4]
cd "$(dirname "$0")/.."
source out/device_lib.sh
d=${1:-build-fe}
more $d test_cuda_attention test_model || exit 1
el built
sanitize 300 120 $d/bin/test_cuda_attention \
  'Cache/CudaAttentionKv.DecodeWithEarlierKeysStored/i8:Cache/CudaAttentionKv.ManySequencesDecode/e4m3' 2>&1 |
  tee $OUT/sanitizers.log
awk 'BEGIN { srand(7); for (r = 0; r < 64; ++r) { n = 500 + int(rand() * 300); printf "{\"token_ids\": [";
  for (i = 0; i < n; ++i) printf "%s%d", (i ? "," : ""), 1000 + int(rand() * 100000); print "]}" } }' > /tmp/req.jsonl
for c in int8 fp8; do
  for x in build-gpu build-gpu $d; do
    before 360 || break
    echo "$c $x $(timeout 60 $x/bin/hf2q generate -m /tmp/g26.gguf --backend cuda --prompts /tmp/req.jsonl -n 64 \
      -np 64 --temp 0 --json --cache-type $c 2>/dev/null | md5sum)"
  done
done 2>&1 | tee $OUT/race.txt
before 420 && t model 120 $d/bin/test_model --gtest_filter='*Int8*:*E4m3*:*DecodeArgmax*:*Batching*:*Cuda*'
el done
