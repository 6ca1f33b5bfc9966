#!/usr/bin/env bash
# Session 58, main with Q5_0's lane copy on (m) on whatever card comes: the GPU test binaries in full, then the
# 64-sequence rows against the copy off (n) and the i8 fold on (f), alternating, then the summary's other rows of m.
# Binaries: `bash out/s58build.sh DIR` (its header says what m, n and f are).
#   run(carry=["out/bin58"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s58b.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-580}
V=build-v
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
unbundle out/bin58/bundle58.tar.xz m n f
el unpacked
synth_g26 /tmp/bund/hf2q_m &
t ops 200 /tmp/bund/test_cuda_ops &
t att 200 /tmp/bund/test_cuda_attention &
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in m n f m n f; do before $((L - 200)) && row $v int8 64; done
  for v in m n f; do before $((L - 200)) && row $v fp8 64; done
  for v in m n; do before $((L - 200)) && row $v f16 64; done
  before $((L - 200)) && row m f16 32
  before $((L - 170)) && b $V/m -p 4096 -n 128 -b 1 -r 2 -ub 4096
  before $((L - 150)) && b $V/n -p '' -n 128 -b 1 -r 2
} 2>&1 | tee $OUT/bench.txt
el bench
if before $((L - 130)); then
  t model 120 /tmp/bund/test_model &
  t sampling 120 /tmp/bund/test_cuda_sampling &
  t profiling 120 /tmp/bund/test_profiling &
  t generation 120 /tmp/bund/test_generation &
  t synth_engine 120 /tmp/bund/test_synth_engine &
  wait
fi
el done
