#!/usr/bin/env bash
# Session 61, after 2fc5afa and a612a4c (the tile copies on by default, read at 17-32 tokens): d (out/bin61c, that
# commit's hf2q and GPU tests, packed by out/bundle.sh from a Release CUDA build) against m (out/bin61, 7da271f: no
# copies). The tile and matmul tests (the new DefaultBackendStopsAt32Tokens), test_model, test_synth_engine and
# test_generation beside the synth; memcheck of the tile tests; then the int8 rows at 17, 24, 32 and 64 sequences and
# f16 at 32, m and d alternating.
#   run(carry=["out/bin61", "out/bin61c"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s61c.sh
# out/bin61c from a Release CUDA build B of main (ninja -C B hf2q test_cuda_ops test_model test_synth_engine
# test_generation): d=$(mktemp -d); for b in hf2q test_cuda_ops test_model test_synth_engine test_generation; do
#   cp B/bin/$b $d/${b/hf2q/hf2q_d}; done; bash out/bundle.sh out/bin61c/bundle61c.tar.xz $d/*
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-420}
V=build-v
unbundle out/bin61/bundle61.tar.xz m
unbundle out/bin61c/bundle61c.tar.xz d  # its test binaries replace bundle61's
synth_g26 /tmp/bund/hf2q_d &
t ops 150 /tmp/bund/test_cuda_ops --gtest_filter='*TileGemm*:*Matmul*:*SmallGemm*'
t model 60 /tmp/bund/test_model
wait
el tests
{ row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
  for n in 32 17 24 64; do for v in m d; do before $((L - 60)) && row $v int8 $n; done; done
  for v in m d; do before $((L - 50)) && row $v f16 32; done
  for v in m d; do before $((L - 40)) && row $v int8 32; done
} 2>&1 | tee $OUT/bench.txt
el bench
for v in m d; do  # what the copies take (bench's load line)
  before $((L - 45)) && echo "$v: $(timeout 40 $V/$v/bin/hf2q bench -m /tmp/g26.gguf --backend cuda -p '' -n 1 -b 17 -r 1 \
    2>&1 | grep -o 'weight copies [^(]*' | head -1)"
done
before $((L - 35)) && t synth 30 /tmp/bund/test_synth_engine
before $((L - 25)) && sanitize $((L - 20)) 20 /tmp/bund/test_cuda_ops '*TileGemm.SmallShapes:*TileGemm.DefaultBackend*'
el done
