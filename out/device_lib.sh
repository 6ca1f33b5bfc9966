# Shared by the device scripts from session 43 on (sourced, from the repository root):
# OUT, the elapsed-time log, the time guard, and a test binary's verdict lines.
set -uo pipefail
export OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ]; }
t() {  # t NAME TIMEOUT BIN ARGS...: a test binary, its verdict lines
  local name=$1 to=$2; shift 2
  timeout $to "$@" > $OUT/$name.log 2>&1; echo "$name rc=$?"
  grep -E "^\[  FAILED|PASSED|Failure|SKIPPED \]|max rel err" $OUT/$name.log | head -16
}
synth_g26() {  # synth_g26 [HF2Q]: the 26B-A4B Q4_K_M of random weights every bench row reads, /tmp/g26.gguf
               # (written by HF2Q, build-gpu's hf2q unless named)
  "${1:-build-gpu/bin/hf2q}" synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf \
    > /tmp/synth.log 2>&1
  echo "synth rc=$?"
}
unbundle() {  # unbundle ARCHIVE VARIANTS...: out/bundle.sh's archive unpacked into /tmp/bund, and each VARIANT's
              # /tmp/bund/hf2q_VARIANT installed as build-v/VARIANT/bin/hf2q (a DIR for b)
  local v
  mkdir -p /tmp/bund && xz -dc "$1" | tar xf - -C /tmp/bund && chmod +x /tmp/bund/* || return 1
  shift
  for v in "$@"; do mkdir -p build-v/$v/bin && cp /tmp/bund/hf2q_$v build-v/$v/bin/hf2q; done
}
b() {  # b DIR ARGS...: one bench line of DIR/bin/hf2q on /tmp/g26.gguf (the tokens/s columns)
  local d=$1; shift
  echo "$d $* :: $(timeout 100 $d/bin/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 |
    grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
}
variant() {  # variant DIR CUDA_FLAGS TARGETS...: a Release CUDA build of this tree in DIR, its verdict
  local dir=$1 fl=$2
  shift 2
  build_tree "$dir" "" "$fl" "$@"
}
variant_all() {  # variant_all DIR DEFS TARGETS...: the same with DEFS for C++ and CUDA alike (a layout
                 # both backends must agree on, as HF2Q_KV_HEAD_MAJOR)
  local dir=$1 fl=$2
  shift 2
  build_tree "$dir" "$fl" "$fl" "$@"
}
build_tree() {  # build_tree DIR CXX_FLAGS CUDA_FLAGS TARGETS...: what variant and variant_all run
  local dir=$1 cxx=$2 fl=$3 n
  n=$(basename "$dir")
  shift 3
  ( cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON "-DCMAKE_CXX_FLAGS=$cxx" \
      "-DCMAKE_CUDA_FLAGS=$fl" > /tmp/cfg-$n.log 2>&1 && cmake --build "$dir" -j16 --target "$@" > /tmp/build-$n.log 2>&1
    echo "$dir rc=$?"; grep -B2 -A10 " error" /tmp/build-$n.log | head -30 )
}
passes() {  # passes NAME TIMEOUT BIN ARGS...: t, then whether every test it ran passed
  local name=$1
  t "$@"
  grep -q "^\[  PASSED" $OUT/$name.log && ! grep -q "FAILED" $OUT/$name.log
}
more() {  # more DIR TARGETS...: more targets in a build directory that variant configured
  local dir=$1 n
  n=$(basename "$dir")
  shift
  cmake --build "$dir" -j16 --target "$@" > /tmp/build-$n.log 2>&1 ||
    { grep -B2 -A14 "error" /tmp/build-$n.log | head -60; return 1; }
}
sanitize() {  # sanitize UNTIL TIMEOUT BIN FILTER: memcheck, then racecheck, of BIN's tests FILTER, while
              # the script is younger than UNTIL seconds; their verdicts
  local until=$1 to=$2 bin=$3 filter=$4 tool
  for tool in memcheck racecheck; do
    before $until || break
    timeout $to compute-sanitizer --tool $tool --error-exitcode 1 $bin --gtest_filter="$filter" > /tmp/$tool.log 2>&1
    echo "$tool rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY" /tmp/$tool.log | tail -1
  done
}
ab64() {  # ab64 DIRS...: the 64-sequence int8 and fp8 rows of each DIR, alternating, twice (the A/Bs'
          # common rows)
  local i c d
  for i in 1 2; do
    for c in int8 fp8; do
      for d in "$@"; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type $c; done
    done
  done
}
ab64_all() {  # ab64_all DIRS...: the 64-sequence f16, int8 and fp8 rows of each DIR, alternating, twice
  local i c d
  for i in 1 2; do
    for c in f16 int8 fp8; do
      for d in "$@"; do b $d -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --cache-type $c; done
    done
  done
}
warp_ab() {  # warp_ab NAME CUDA_FLAGS: the keys-by-warp kernel's A/B (sessions 46-47): main (build-gpu)
            # and the variant (build-NAME) built in one call; the 8-bit attention tests and the
            # sanitizers on the variant; ncu's duration, DRAM rate and excess sectors for both
            # (DISABLED_Perf's 64-sequence i8 case); then the 64-sequence int8/fp8 rows alternating
            # twice and 8 sequences int8, of main and of the variant if its tests passed
  local v=build-$1 fl=$2 d
  variant build-gpu "" hf2q test_cuda_attention &
  variant $v "$fl" hf2q test_cuda_attention &
  wait
  el built
  synth_g26 &
  local ok=()
  passes attention-$1 150 $v/bin/test_cuda_attention \
    --gtest_filter='Cache/*/i8:Cache/*/e4m3:*SplitPlan*:-*DISABLED*' && ok+=($v)
  sanitize 250 100 $v/bin/test_cuda_attention \
    'Cache/CudaAttentionKv.DecodeWithEarlierKeysStored/i8:Cache/CudaAttentionKv.ManySequencesDecode/e4m3' 2>&1 |
    tee $OUT/sanitizers.log
  local K='regex:attention_split_warps_kernel.*256'
  for d in build-gpu $v; do
    timeout 100 ncu --section SpeedOfLight --section SourceCounters --kernel-name-base demangled --kernel-name "$K" \
      --launch-skip 20 --launch-count 1 $d/bin/test_cuda_attention --gtest_also_run_disabled_tests \
      --gtest_filter="Cache/CudaAttentionKv.DISABLED_Perf/i8" > $OUT/ncu-$d.txt 2>&1
    echo "ncu $d rc=$?"; grep -E "  Duration|DRAM Throughput|excessive sectors|excessive wavefronts" -A1 $OUT/ncu-$d.txt | head -12
  done
  echo "benched: build-gpu ${ok[*]}"
  wait
  el tested
  { ab64 build-gpu "${ok[@]}"
    for d in build-gpu "${ok[@]}"; do b $d -p '' -n 32 -b 8 -d 1024 -r 2 -ub 4096 --cache-type int8; done
  } 2>&1 | tee $OUT/bench.txt
  el done
}
knock_tree() {  # knock_tree TARGETS...: a copy of this tree in /tmp/ktree patched by out/knock.patch (the warp
               # kernel's run-time knock-outs, HF2Q_KNOCK, bits: 1 no scores, 2 no P·V, 16 every token
               # reads token 0's blocks, so the KV comes from L2, 32 tile copies without the source-size
               # operand, 64 token t reads token t % 8's blocks (32 MB: L2 too), 128 no row-scale loads),
               # TARGETS built in /tmp/ktree/build-k
  local root=$PWD
  rm -rf /tmp/ktree && mkdir -p /tmp/ktree
  cp -r CMakeLists.txt bench fuzz include scripts src tests tools /tmp/ktree/
  ( cd /tmp/ktree && patch -p1 -s < "$root/out/knock.patch" && echo patched && variant /tmp/ktree/build-k "" "$@" )
}
knock_perf() {  # knock_perf NAME BIN: DISABLED_Perf/i8's 64-sequence head-size-256 times (µs: as launched,
                # generic kernel, with the key bound, one split without a workspace)
  timeout 60 $2 --gtest_also_run_disabled_tests --gtest_filter='Cache/CudaAttentionKv.DISABLED_Perf/i8' \
    > /tmp/perf-$1.log 2>&1
  echo "$1: $(grep -A12 'decode 64 seqs x 1 @1024, D=256' /tmp/perf-$1.log | grep ' us ' |
    grep -E 'decode 64|generic|key bound|split kernel' | head -4 | awk -F' us' '{print $1}' |
    awk '{print $NF}' | tr '\n' ' ')"
}
trace_step() {  # trace_step NAME BENCH_ARGS...: a CUPTI trace of build-gpu's bench on /tmp/g26.gguf (hf2q_cupti_trace
                # built), summarised by scripts/trace_summary.py into $OUT/trace_NAME.txt (its head shown)
  local name=$1; shift
  CUDA_INJECTION64_PATH=$PWD/build-gpu/lib/libhf2q_cupti_trace.so HF2Q_TRACE_OUT=/tmp/trace_$name.csv \
    timeout 150 build-gpu/bin/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" > /tmp/trace_$name.log 2>&1
  echo "trace $name rc=$?"
  python3 scripts/trace_summary.py /tmp/trace_$name.csv --skip 4 > $OUT/trace_$name.txt 2>&1
  head -40 $OUT/trace_$name.txt
}
pool_probe() {  # pool_probe: out/pool_probe.cu (the KV pool layouts' read rate alone, seconds) into probe.txt
  nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/pool_probe out/pool_probe.cu && /tmp/pool_probe | tee $OUT/probe.txt
}
setdef() {  # setdef FILE NAME VALUE: a switch's default (#define NAME VALUE) in src/backends/cuda/FILE, for
            # one-object variants built in one directory (sessions 51-52)
  sed -i "s/^#define $2 [0-9]*\$/#define $2 $3/" src/backends/cuda/$1
  grep -q "^#define $2 $3\$" src/backends/cuda/$1 || echo "setdef $2 $3 failed"
}
snap() {  # snap NAME: hf2q rebuilt in build-gpu (after setdef) and copied to build-v/NAME/bin
  more build-gpu hf2q || { echo "snap $1 failed"; return 1; }
  mkdir -p build-v/$1/bin && cp build-gpu/bin/hf2q build-v/$1/bin/ && el "snap $1"
}
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
