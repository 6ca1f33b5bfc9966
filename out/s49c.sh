#!/usr/bin/env bash
# Session 49, after out/s49b.sh: where the keys-by-warp kernel's warps stall when its KV comes
# from L2 (HF2Q_KNOCK=16, out/knock.patch: 79 us on an H100 against 103 from DRAM, L2 half
# busy), so what bounds it there: the knock-out copy built with -lineinfo, ncu's warp-state and
# source counters of DISABLED_Perf/i8's 64-sequence launch, the SASS source page's top stall
# lines (out/s46g.sh's reader). About 4 minutes.
#   mkdir -p $OUT && OUT=$OUT bash out/s49c.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
root=$PWD
rm -rf /tmp/ktree && mkdir -p /tmp/ktree
cp -r CMakeLists.txt bench fuzz include scripts src tests tools /tmp/ktree/
( cd /tmp/ktree && patch -p1 -s < "$root/out/knock.patch" &&
    variant /tmp/ktree/build-li "-lineinfo" test_cuda_attention )
el built
HF2Q_KNOCK=16 timeout 200 ncu --set full \
  --import-source yes --kernel-name-base demangled --kernel-name 'regex:attention_split_warps_kernel.*256' \
  --launch-skip 20 --launch-count 1 -f -o /tmp/k16 /tmp/ktree/build-li/bin/test_cuda_attention \
  --gtest_also_run_disabled_tests --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/i8" > /tmp/ncu.log 2>&1
echo "ncu rc=$?"
ncu -i /tmp/k16.ncu-rep --print-summary none 2>/dev/null |
  grep -E "Duration|Stall|Warp Cycles|Eligible|Issued" | head -20
timeout 120 ncu -i /tmp/k16.ncu-rep --page source --csv --print-source sass > /tmp/src-sass.csv 2>&1
sed -n '/^  python3 - \/tmp\/src-\$view.csv/,/^PY$/p' out/s46g.sh | sed '1d;$d' > /tmp/top.py
python3 /tmp/top.py /tmp/src-sass.csv 2>&1 | tee $OUT/k16-stalls.txt | head -80
el done
