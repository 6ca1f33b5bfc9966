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
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader
