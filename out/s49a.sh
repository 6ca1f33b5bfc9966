#!/usr/bin/env bash
# Session 49 (H100 or H200): how far the keys-by-warp kernel is from its floor without DRAM, and
# where a 64-sequence int8 step goes now. Main (build-gpu: hf2q, test_cuda_attention, the CUPTI
# tracer) and the knock-out copy (out/knock.patch) built in one go; DISABLED_Perf/i8's
# 64-sequence lines for main and the knock-outs (16: every token reads token 0's blocks, so the
# 268 MB come from L2, not DRAM; 16+3 the same without scores and P·V; 3 from DRAM without
# them); then CUPTI traces of the 64-sequence step with the int8 and f16 caches. About 5 minutes.
# Arguments, if any: the knock-outs to run instead (out/s49d.sh).
#   mkdir -p $OUT && OUT=$OUT bash out/s49a.sh [KNOCK...]
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-gpu "" hf2q test_cuda_attention hf2q_cupti_trace &
knock_tree test_cuda_attention &
wait
el built
synth_g26 &
{ knock_perf main build-gpu/bin/test_cuda_attention
  for k in ${@:-16 19 3 17 18 0}; do HF2Q_KNOCK=$k knock_perf knock$k /tmp/ktree/build-k/bin/test_cuda_attention; done
  knock_perf main2 build-gpu/bin/test_cuda_attention
} 2>&1 | tee $OUT/knock.txt
wait
el knocked
trace_step b64_int8 -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096 --cache-type int8
el
trace_step b64_f16 -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096
el done
