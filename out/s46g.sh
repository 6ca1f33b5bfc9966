#!/usr/bin/env bash
# Session 46: which source lines of the keys-by-warp kernel (i8, head size 256, the 64-sequence
# case of DISABLED_Perf, as out/s46e.sh) cause its excess L2 sectors (ncu: 36 % of its global
# sectors) and shared-memory wavefronts (36 %), and where its warps stall: a -lineinfo build,
# ncu's source page as CSV, the top lines of each column.
#   mkdir -p $OUT && OUT=$OUT bash out/s46g.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
variant build-li "-lineinfo" test_cuda_attention
[ -x build-li/bin/test_cuda_attention ] || exit 1
el built
K='regex:attention_split_warps_kernel.*256'
timeout 200 ncu --set full --import-source yes --kernel-name-base demangled --kernel-name "$K" \
  --launch-skip 20 --launch-count 1 -f -o /tmp/warp-i8 build-li/bin/test_cuda_attention \
  --gtest_also_run_disabled_tests --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/i8" > /tmp/ncu.log 2>&1
echo "ncu rc=$?"; tail -3 /tmp/ncu.log
ncu --help | grep -A6 -E "^ +--print-source|^ +--page" | head -24
for view in sass cuda; do
  timeout 120 ncu -i /tmp/warp-i8.ncu-rep --page source --csv --print-source $view > /tmp/src-$view.csv 2>&1
  echo "source page $view rc=$? $(wc -l < /tmp/src-$view.csv) lines"; head -c 600 /tmp/src-$view.csv; echo
  python3 - /tmp/src-$view.csv > $OUT/source-top-$view.txt 2>&1 <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
width = max(len(r) for r in rows)
hdr_i = next(i for i, r in enumerate(rows) if len(r) == width)
hdr, body = rows[hdr_i], [r for r in rows[hdr_i + 1:] if len(r) == width]
src = next((i for i, c in enumerate(hdr) if c.strip() == "Source"), 1)
line = next((i for i, c in enumerate(hdr) if c.strip() in ("#", "Line No", "Address")), 0)
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return 0.0
print("columns:", hdr)
for want in ("Excessive", "Stall Sampling (All", "Sectors Global", "Wavefronts Shared"):
    for ci, name in enumerate(hdr):
        if want not in name: continue
        tot = sum(num(r[ci]) for r in body)
        print(f"\n== {name} (total {tot:.0f})")
        for r in sorted(body, key=lambda r: -num(r[ci]))[:14]:
            if num(r[ci]) == 0: continue
            print(f"{num(r[ci]):12.0f}  {r[line]:>8}  {r[src].strip()[:110]}")
PY
  echo "parse $view rc=$?"; head -c 5000 $OUT/source-top-$view.txt; echo
done
el done
