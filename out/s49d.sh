#!/usr/bin/env bash
# For the next H200 (session 49 had only H100s): the H100 findings of out/s49a.sh and s49b.sh on
# the card the target is set for. The pipeline probe (seconds); main (hf2q, test_cuda_attention,
# the CUPTI tracer) and the knock-out copy (out/knock.patch) built together; DISABLED_Perf/i8's
# 64-sequence lines for main and the knock-outs that told most on the H100 (16 and 64: KV in L2;
# 19: in L2 without arithmetic; 3: from DRAM without it); then CUPTI traces of the 64-sequence
# step with the int8 and f16 caches (trace_step). About 5 minutes.
#   mkdir -p $OUT && OUT=$OUT bash out/s49d.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/pipe_probe out/pipe_probe.cu && /tmp/pipe_probe > $OUT/pipe.txt 2>&1
grep -E "copy|W 4 S 3  " $OUT/pipe.txt | head -6
el probed
variant build-gpu "" hf2q test_cuda_attention hf2q_cupti_trace &
knock_tree test_cuda_attention &
wait
el built
( build-gpu/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1; echo "synth rc=$?" ) &
{ knock_perf main build-gpu/bin/test_cuda_attention
  for k in 16 64 19 3 0; do HF2Q_KNOCK=$k knock_perf knock$k /tmp/ktree/build-k/bin/test_cuda_attention; done
  knock_perf main2 build-gpu/bin/test_cuda_attention
} 2>&1 | tee $OUT/knock.txt
wait
el knocked
trace_step b64_int8 -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096 --cache-type int8
trace_step b64_f16 -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096
el done
