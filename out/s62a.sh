#!/usr/bin/env bash
# Session 62: session 61's committed code on a GPU (the tile, matmul and model tests, the synth and generation tests,
# memcheck of the tile GEMM's small shapes; the default rows of main d against m, no tile copies, at 17-64
# sequences) and the tile GEMM at 64 tokens again with 16-warp blocks (w; x: 8 warps; w32: 16 warps at main's
# 17-32): the tokens' chunk is half a block's bytes at 64 tokens with 128-row blocks, so 256-row blocks read half
# the bytes a row. Binaries: `bash out/s62build.sh DIR` (out/bin62/bundle62.tar.xz).
# On an H200 with out/bin61 carried too, then session 61's n (Q5_0's lane copy off) and f (the i8 score fold on)
# against m at 64 sequences (neither has run on an H200; both built at 7da271f without tile copies, as m).
#   run(carry=["out/bin62"(, "out/bin61")]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s62a.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-520}
V=build-v
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
unbundle out/bin62/bundle62.tar.xz d m x w w32
synth_g26 /tmp/bund/hf2q_d &
t ops 150 /tmp/bund/test_cuda_ops --gtest_filter='*TileGemm*:*Matmul*:*SmallGemm*'
t ops16 100 /tmp/bund/test_ops16 --gtest_filter='*TileGemm*:*MatmulMulti*'
t model 60 /tmp/bund/test_model
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in d m x w; do before $((L - 150)) && row $v int8 64; done
  for v in d m w32; do before $((L - 130)) && row $v int8 32; done
  for v in w x m d; do before $((L - 110)) && row $v int8 64; done
  for n in 17 24; do for v in m d; do before $((L - 90)) && row $v int8 $n; done; done
  for v in m d; do before $((L - 80)) && row $v f16 32; done
} 2>&1 | tee $OUT/bench.txt
el bench
for v in m d w; do  # what the copies take (bench's load line)
  before $((L - 70)) && echo "$v: $(timeout 40 $V/$v/bin/hf2q bench -m /tmp/g26.gguf --backend cuda -p '' -n 1 -b 17 -r 1 \
    2>&1 | grep -o 'weight copies [^(]*' | head -1)"
done
F=(--gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MatmulThroughput')
for o in test_cuda_ops test_ops16; do
  before $((L - 60)) || break
  timeout 25 /tmp/bund/$o "${F[@]}" > $OUT/perf_$o.log 2>&1
  echo "== $o rc=$?"; grep -E "T=   (17|32|64)" $OUT/perf_$o.log | grep -E "tile copy|cuBLAS" | head -24
done
before $((L - 45)) && t synth 30 /tmp/bund/test_synth_engine
before $((L - 35)) && t generation 30 /tmp/bund/test_generation
before $((L - 25)) && sanitize $((L - 20)) 20 /tmp/bund/test_cuda_ops '*TileGemm.SmallShapes:*TileGemm.DefaultBackend*'
el done
case "$card" in *H200*)
  [ -f out/bin61/bundle61.tar.xz ] || exit 0
  mkdir -p /tmp/b61 && xz -dc out/bin61/bundle61.tar.xz | tar xf - -C /tmp/b61 ./hf2q_n ./hf2q_f
  for v in n f; do mkdir -p $V/$v/bin && cp /tmp/b61/hf2q_$v $V/$v/bin/hf2q && chmod +x $V/$v/bin/hf2q; done
  { for i in 1 2; do for v in m n f; do before $((L - 15)) && row $v int8 64; done; done
  } 2>&1 | tee $OUT/bench_h200.txt
  el h200 ;;
esac
