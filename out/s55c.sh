#!/usr/bin/env bash
# For session 55 (branch wip/s55-ds): the staged (d, d·Σq) pairs an odd number of pairs apart
# (gemv_mma.cu, HF2Q_GEMV_MMA_DS_ODD). No build on the device: binaries built on the CPU machine (sm_90a,
# stripped, xz -9) in out/bin55z:
#   o   wip/s55-ds as committed (HF2Q_GEMV_MMA_DS_ODD 1): hf2q, test_cuda_ops, test_model
#   e   the same with HF2Q_GEMV_MMA_DS_ODD 0 (main's layout): hf2q
# To rebuild: ninja -C /work/build-cuda hf2q test_cuda_ops test_model; strip; xz -9 -c; for e set the
# define to 0, rebuild hf2q, restore it.
#   run(carry=["out/bin55z"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s> bash out/s55c.sh
# About 5 minutes: the 64-sequence rows alternating (int8 twice, fp8, f16), 32 sequences int8; test_cuda_ops
# and test_model's CUDA cases of o; the expert kernel's rows of o; ncu of o's GEGLU launch (shared wavefronts).
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-600}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for v in o e; do
  mkdir -p build-v/$v/bin && xz -dc out/bin55z/hf2q_$v.xz > build-v/$v/bin/hf2q && chmod +x build-v/$v/bin/hf2q
done
T=out/bin55
mkdir -p $T && for f in test_cuda_ops_o test_model_o; do xz -dc out/bin55z/$f.xz > $T/$f; chmod +x $T/$f; done
build-v/o/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
  > /tmp/synth.log 2>&1
echo "synth rc=$?"
el synth
row() { b build-v/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for i in 1 2; do for v in o e; do before $((L - 150)) && row $v int8 64; done; done
  for v in o e; do before $((L - 140)) && row $v fp8 64; done
  for v in o e; do before $((L - 130)) && row $v f16 64; done
  for v in o e; do before $((L - 120)) && row $v int8 32; done
} 2>&1 | tee $OUT/bench.txt
el bench
before $((L - 110)) && t ops 100 $T/test_cuda_ops_o
before $((L - 60)) && t model 60 $T/test_model_o --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*'
el tests
before $((L - 40)) && timeout 30 $T/test_cuda_ops_o --gtest_also_run_disabled_tests \
  --gtest_filter='*DISABLED_MoeThroughput*' 2>&1 | grep -E "T=   64|T=  512" | tee $OUT/moe.txt
before $((L - 25)) && timeout 25 ncu --section SourceCounters --section SpeedOfLight --kernel-name-base demangled \
  --kernel-name "regex:gemv_mma_kernel<.*\(int\)4, \(int\)4, \(bool\)1, \(bool\)1>" --launch-skip 3 --launch-count 1 \
  $T/test_cuda_ops_o --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MoeThroughput*' > $OUT/ncu.txt 2>&1
grep -E "Duration|DRAM Throughput|L1/TEX Cache|excessive" $OUT/ncu.txt
# Every kernel of a short 64-sequence run (a 4,096-token prefill, then decode steps): its shared-memory
# wavefronts and bank conflicts, to find the next conflicted kernel (scripts: summed by kernel here).
before $((L - 100)) && timeout 90 ncu --csv --metrics gpu__time_duration.sum,\
l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum \
  build-v/o/bin/hf2q bench -m /tmp/g26.gguf --backend cuda -p '' -n 3 -b 64 -d 64 -r 1 -ub 4096 \
  --cache-type int8 > $OUT/ncu-step.csv 2>&1
echo "ncu-step rc=$? $(wc -l < $OUT/ncu-step.csv) lines"
el done
