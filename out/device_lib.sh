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
b() {  # b DIR ARGS...: one bench line of DIR/bin/hf2q on /tmp/g26.gguf (the tokens/s columns)
  local d=$1; shift
  echo "$d $* :: $(timeout 100 $d/bin/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 |
    grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"
}
variant() {  # variant DIR CUDA_FLAGS TARGETS...: a Release CUDA build of this tree in DIR, its verdict
  local dir=$1 fl=$2 n
  n=$(basename "$dir")
  shift 2
  ( cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON "-DCMAKE_CUDA_FLAGS=$fl" \
      > /tmp/cfg-$n.log 2>&1 && cmake --build "$dir" -j16 --target "$@" > /tmp/build-$n.log 2>&1
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
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
