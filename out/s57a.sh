#!/usr/bin/env bash
# Session 57's prepared changes, both off on main: Q5_0's lane copy (HF2Q_GEMV_MMA_Q50_LANES) and the i8 score
# fold (HF2Q_SPLIT_I8_FOLD), against main's code, and the pairs' odd stride (HF2Q_GEMV_MMA_DS_ODD, main since
# session 55), on whatever card comes. The binaries (out/bin57x, ignored) come from `bash out/s57build.sh DIR` on
# the CPU machine (its header says what fold, lanes, o and e are; the tests are fold's).
#   run(carry=["out/bin57x"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s> bash out/s57a.sh
# The changed kernels' tests first, then the 64-sequence rows alternating (int8 twice, fp8), the expert kernel
# alone, more rows (f16, e, 32 sequences), the other suites, a CUPTI trace of the int8 step, and SASS counts.
cd "$(dirname "$0")/.."
source out/device_lib.sh
L=${LIMIT:-600}
V=build-v
unbundle out/bin57x/bundle57.tar.xz fold lanes o e
el unpacked
synth_g26 /tmp/bund/hf2q_fold &
t ops 150 /tmp/bund/test_cuda_ops --gtest_filter='*Expert*:*Grouped*:*Moe*:*Matmul*' &
t att 150 /tmp/bund/test_cuda_attention --gtest_filter='*i8*:*I8*:*Split*:*Warp*:-*DISABLED*' &
wait
el tests
row() { b $V/$1 -p '' -n 32 -b $3 -d 1024 -r 2 -ub 4096 --cache-type $2; }
{ for v in fold lanes o; do before $((L - 60)) && row $v int8 64; done
  for v in lanes o; do before $((L - 60)) && row $v fp8 64; done
  for v in fold lanes o; do before $((L - 60)) && row $v int8 64; done
  before $((L - 150)) && { timeout 60 /tmp/bund/test_cuda_ops --gtest_also_run_disabled_tests \
    --gtest_filter='*DISABLED_MoeThroughput' > $OUT/moe.log 2>&1; grep -E "moe (down|gate_up|geglu)" $OUT/moe.log |
    grep -E "T=   64|T=  512" | grep "device only"; }
  for v in lanes o; do before $((L - 60)) && row $v f16 64; done
  for v in e o; do before $((L - 60)) && row $v int8 64; done
  for v in fold o; do before $((L - 60)) && row $v int8 32; done
  for v in e o; do before $((L - 60)) && row $v fp8 64; done
} 2>&1 | tee $OUT/bench.txt
el bench
if before $((L - 125)); then  # the rest of the suites the change touches
  t model 110 /tmp/bund/test_model --gtest_filter='*Cuda*:*Batching*:*Graph*:*Concurrent*:*Int8*' &
  t ops-all 110 /tmp/bund/test_cuda_ops &
  wait
fi
el tests2
if before $((L - 60)); then
  CUDA_INJECTION64_PATH=$PWD/out/bin57x/libhf2q_cupti_trace.so HF2Q_TRACE_OUT=/tmp/trace.csv \
    timeout 50 $V/fold/bin/hf2q bench -m /tmp/g26.gguf --backend cuda -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096 \
    --cache-type int8 > /tmp/trace.log 2>&1
  echo "trace rc=$?"
  python3 scripts/trace_summary.py /tmp/trace.csv --skip 4 > $OUT/trace_fold.txt 2>&1
  head -30 $OUT/trace_fold.txt
fi
el trace
if before $((L - 20)) && command -v cuobjdump > /dev/null; then  # SASS instructions of each expert-GEMV kernel
  for v in fold o; do
    cuobjdump -sass $V/$v/bin/hf2q 2>/dev/null | awk '/Function :/ {f = $3} /^ +\/\*[0-9a-f]+\*\/ / {n[f]++}
      END {for (k in n) print n[k], k}' | grep gemv_mma_kernel | sort -k2 > $OUT/sass-$v.txt
    echo "$v:"; cat $OUT/sass-$v.txt | cut -c1-160
  done
fi
el done
