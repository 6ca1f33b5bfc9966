#!/usr/bin/env bash
# For session 55's last device minutes (main at 34d7b3e or later; binaries of out/s55c.sh in out/bin55z):
# o against e at 64 sequences (int8 twice, fp8), then ncu's source page of o's GEGLU launch (where the
# remaining shared-memory wavefronts and stalls are). About 2 minutes.
#   run(carry=["out/bin55z"]): mkdir -p $OUT && OUT=$OUT bash out/s55d.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
for v in o e; do
  mkdir -p build-v/$v/bin && xz -dc out/bin55z/hf2q_$v.xz > build-v/$v/bin/hf2q && chmod +x build-v/$v/bin/hf2q
done
T=out/bin55
mkdir -p $T && xz -dc out/bin55z/test_cuda_ops_o.xz > $T/test_cuda_ops_o && chmod +x $T/test_cuda_ops_o
build-v/o/bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
  > /tmp/synth.log 2>&1
echo "synth rc=$?"
row() { b build-v/$1 -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for c in int8 int8 fp8; do for v in o e; do row $v $c; done; done; } 2>&1 | tee $OUT/bench.txt
el bench
timeout 60 ncu --section SourceCounters --section WarpStateStats --kernel-name-base demangled \
  --kernel-name "regex:gemv_mma_kernel<.*\(int\)4, \(int\)4, \(bool\)1, \(bool\)1>" --launch-skip 3 --launch-count 1 \
  -o $OUT/rep $T/test_cuda_ops_o --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_MoeThroughput*' \
  > $OUT/ncu.log 2>&1
echo "ncu rc=$?"
ncu -i $OUT/rep.ncu-rep --page source --csv --print-source sass > $OUT/sass.csv 2>&1
ncu -i $OUT/rep.ncu-rep --page details --print-details all > $OUT/det.txt 2>&1
el done
