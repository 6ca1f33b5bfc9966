#!/usr/bin/env bash
# Session 58: the experts' L2 prefetch (m: off, p16 / p32: 16 / 32 MiB of each MoE layer's gate_up asked of L2 by
# the residual_norms before the router chain) on whatever card comes. Binaries: `bash out/s58pbuild.sh DIR`.
#   run(carry=["out/bin58p"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s58p.sh
# The prefetch's test and the residual-norms and MoE tests beside the synth, the 64-sequence rows alternating, the
# model tests, then a CUPTI trace of the best guess (p32).
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-400}
V=build-v
nvidia-smi --query-gpu=name --format=csv,noheader
unbundle out/bin58p/bundle58p.tar.xz m p16 p32
synth_g26 /tmp/bund/hf2q_m &
t ops 100 /tmp/bund/test_cuda_ops --gtest_filter='*ResidualNorms*:*Moe*:*Expert*:*Grouped*' &
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in m p16 p32 m p16 p32; do before $((L - 120)) && row $v int8 64; done
  for v in m p32; do before $((L - 120)) && row $v f16 64; done
  for v in m p32; do before $((L - 120)) && row $v int8 32; done
} 2>&1 | tee $OUT/bench.txt
el bench
before $((L - 100)) && t model 90 /tmp/bund/test_model --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*'
if before $((L - 40)); then
  CUDA_INJECTION64_PATH=$PWD/out/bin58p/libhf2q_cupti_trace.so HF2Q_TRACE_OUT=/tmp/trace.csv \
    timeout 35 $V/p32/bin/hf2q bench -m /tmp/g26.gguf --backend cuda -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096 \
    --cache-type int8 > /tmp/trace.log 2>&1
  python3 scripts/trace_summary.py /tmp/trace.csv --skip 4 > $OUT/trace-p32.txt 2>&1
  head -10 $OUT/trace-p32.txt | cut -c1-100
fi
el done
