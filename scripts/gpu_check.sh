#!/usr/bin/env bash
# On a machine with an NVIDIA GPU (the H200 of docs/performance.md): builds Release
# with CUDA (sm_90a) and runs the steps named in HF2Q_GPU_STEPS (comma-separated,
# default "tests"):
#   tests     CUDA op tests, attention tests, model parity on CPU and GPU, generation
#   perf      op throughput tests (the DISABLED_ perf cases of the CUDA tests)
#   sanitize  compute-sanitizer memcheck + racecheck over the CUDA tests
#   bench26   synth gemma4-26b-a4b q4_k_m (--fast) and hf2q bench with HF2Q_BENCH_ARGS
#   bench31   the same for gemma4-31b, benche4b for gemma4-e4b (pp4096, tg128)
#   profile   hf2q bench --profile on the 26B model (per-op time shares)
#   sass      the SASS of the CUDA files in HF2Q_SASS_FILES (default gemv_q8; names in
#             src/backends/cuda, no suffix), compiled as the build compiles them:
#             $OUT/NAME.sass (the kernels matching HF2Q_SASS_KERNELS, default all) and
#             scripts/sass_summary.py's per-loop opcode counts in $OUT/NAME.summary
#   table     every figure of docs/performance.md's top table: the 26B-A4B, E4B and 31B,
#             each with the default weight copies and with the batch copies switched
#             the other way (synthesizes the models it lacks)
#   kernels   Nsight Compute kernel durations of 26B decode steps, summed per kernel
#             (serialized: the sum is pure kernel time, without launch gaps)
#   trace     CUPTI kernel timelines of graph-replayed 26B decode steps (one sequence,
#             64 sequences at 1,024), each kernel charged its share of the critical
#             path by scripts/trace_summary.py (tools/cupti_trace): $OUT/trace_*.txt
#   ab        an A/B on the 26B model: builds the baseline packed by scripts/ab_base.sh
#             (out/ab-base.tgz, or HF2Q_AB_BASE) and runs HF2Q_BENCH_ARGS with the
#             baseline's hf2q, then with this tree's, on the same model file
# HF2Q_BENCH_ARGS (and HF2Q_BENCH_ARGS2 for a second run on the same model) are the
# bench flags.
# Logs go to $OUT (or out/gpu); the last lines printed are a summary.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out/gpu}
mkdir -p "$out"
jobs=$(nproc)
steps=",${HF2Q_GPU_STEPS:-tests},"
bench_args=${HF2Q_BENCH_ARGS:--p 512,4096 -n 128 -b 1,8 -r 2 -ub 4096}
summary=()
step() {  # step NAME COMMAND...: runs, logs, records PASS/FAIL
  local name=$1; shift
  local t0=$(date +%s)
  if "$@" >"$out/$name.log" 2>&1; then summary+=("PASS $name ($(( $(date +%s) - t0 ))s)")
  else summary+=("FAIL $name ($(( $(date +%s) - t0 ))s): see $name.log"); tail -40 "$out/$name.log"; fi
}
has() { [[ $steps == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv >"$out/gpu.txt" 2>&1
git rev-parse --short HEAD >"$out/commit.txt" 2>/dev/null
step configure cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON
targets="hf2q test_cuda_ops test_model"
[ -f tests/cuda/attention_test.cpp ] && targets="$targets test_cuda_attention"
[ -f tests/cuda/sampling_test.cpp ] && targets="$targets test_cuda_sampling"
has tests && targets="$targets test_generation"
has trace && targets="$targets hf2q_cupti_trace"
step build cmake --build build-gpu -j"$jobs" --target $targets
bin=./build-gpu/bin
if has tests; then
  step cuda_ops $bin/test_cuda_ops
  [ -x $bin/test_cuda_attention ] && step cuda_attention $bin/test_cuda_attention
  [ -x $bin/test_cuda_sampling ] && step cuda_sampling $bin/test_cuda_sampling
  step model $bin/test_model
  step generation $bin/test_generation
fi
if has perf; then
  step perf_ops $bin/test_cuda_ops --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_*'
  [ -x $bin/test_cuda_attention ] &&
    step perf_attention $bin/test_cuda_attention --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_*'
  [ -x $bin/test_cuda_sampling ] &&
    step perf_sampling $bin/test_cuda_sampling --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_*'
  grep -h "\[ perf \]" "$out"/perf_*.log
fi
if has sanitize && command -v compute-sanitizer >/dev/null; then
  step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 $bin/test_cuda_ops
  step racecheck compute-sanitizer --tool racecheck --error-exitcode 1 $bin/test_cuda_ops
  [ -x $bin/test_cuda_attention ] && {
    step memcheck_attention compute-sanitizer --tool memcheck --error-exitcode 1 $bin/test_cuda_attention
    step racecheck_attention compute-sanitizer --tool racecheck --error-exitcode 1 $bin/test_cuda_attention
  }
  [ -x $bin/test_cuda_sampling ] && {
    step memcheck_sampling compute-sanitizer --tool memcheck --error-exitcode 1 $bin/test_cuda_sampling
    step racecheck_sampling compute-sanitizer --tool racecheck --error-exitcode 1 $bin/test_cuda_sampling
  }
  step memcheck_model compute-sanitizer --tool memcheck --error-exitcode 1 $bin/test_model --gtest_filter='*Cuda*'
fi
bench() {  # bench NAME PRESET [BENCH FLAGS]
  local name=$1 preset=$2 args=${3:-$bench_args}
  step "synth_$name" $bin/hf2q synth --preset "$preset" --quant q4_k_m --seed 1 --fast --force -o "/tmp/$name.gguf"
  step "bench_$name" bash -c "$bin/hf2q bench -m /tmp/$name.gguf --backend cuda $args"  # bash -c: quoted flags such as -p '' work
  cat "$out/bench_$name.log"
  if [ -n "${HF2Q_BENCH_ARGS2:-}" ]; then
    step "bench2_$name" bash -c "$bin/hf2q bench -m /tmp/$name.gguf --backend cuda $HF2Q_BENCH_ARGS2"
    cat "$out/bench2_$name.log"
  fi
}
has bench26 && bench g26 gemma4-26b-a4b
has profile && { step profile_g26 $bin/hf2q bench -m /tmp/g26.gguf --backend cuda -p 4096 -n 32 -b 1,64 -d 0 -r 1 -ub 4096 --profile;
                 cat "$out/profile_g26.log"; }
if has trace; then
  [ -f /tmp/g26.gguf ] ||
    step synth_g26 $bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf
  trace() {  # NAME BENCH_ARGS...: a traced bench, then its summary
    local name=$1; shift
    CUDA_INJECTION64_PATH=$PWD/build-gpu/lib/libhf2q_cupti_trace.so HF2Q_TRACE_OUT=/tmp/trace_$name.csv \
      $bin/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" &&
      python3 scripts/trace_summary.py /tmp/trace_$name.csv --skip 8 --list >"$out/trace_$name.txt"
  }
  step trace_tg1 trace tg1 -p '' -n 64 -b 1 -r 1
  step trace_b64 trace b64 -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096
fi
if has kernels; then
  step ncu_g26 ncu --clock-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --launch-count 6000 \
    $bin/hf2q bench -m /tmp/g26.gguf --backend cuda -p "" -n 2 -r 1 --no-graphs
  python3 scripts/ncu_kernel_sums.py "$out/ncu_g26.log" 4 | tee "$out/ncu_g26_summary.txt"
fi
if has ab; then
  base_tgz=${HF2Q_AB_BASE:-out/ab-base.tgz}
  base=/tmp/hf2q-ab-base
  rm -rf "$base" && mkdir -p "$base" && tar xzf "$base_tgz" -C "$base"
  step build_base bash -c "cmake -S $base -B $base/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON -DHF2Q_TESTS=OFF &&
                           cmake --build $base/build -j$jobs --target hf2q"
  [ -f /tmp/g26.gguf ] ||
    step synth_g26 $bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf
  step ab_base bash -c "$base/build/bin/hf2q bench -m /tmp/g26.gguf --backend cuda $bench_args"
  step ab_tree bash -c "$bin/hf2q bench -m /tmp/g26.gguf --backend cuda $bench_args"
  echo "== baseline"; cat "$out/ab_base.log"; echo "== this tree"; cat "$out/ab_tree.log"
fi
if has sass; then
  for f in ${HF2Q_SASS_FILES:-gemv_q8}; do
    # the build's own compile command for the file, writing a cubin instead of an object
    cmd=$(python3 - "$f" <<'PY'
import json, re, sys
for e in json.load(open("build-gpu/compile_commands.json")):
    if e["file"].endswith("/src/backends/cuda/" + sys.argv[1] + ".cu"):
        c = re.sub(r" -o \S+", " -o /tmp/sass.cubin", e["command"])
        c = re.sub(r" -c ", " -cubin ", c)
        c = re.sub(r"--generate-code=arch=compute_90a,code=\[compute_90a,sm_90a\]", "-arch=sm_90a", c)
        print("cd " + e["directory"] + " && " + c)
PY
)
    [ -n "$cmd" ] || { summary+=("FAIL sass_$f: not in build-gpu/compile_commands.json"); continue; }
    step "sass_$f" bash -c "$cmd && cuobjdump -sass /tmp/sass.cubin > /tmp/$f.sass"
    python3 scripts/sass_summary.py "/tmp/$f.sass" "${HF2Q_SASS_KERNELS:-.}" > "$out/$f.summary"
    python3 - "/tmp/$f.sass" "${HF2Q_SASS_KERNELS:-.}" > "$out/$f.sass" <<'PY'
import re, sys
keep = False
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
        keep = re.search(sys.argv[2], m.group(1)) is not None
    if keep:
        sys.stdout.write(line)
PY
    cat "$out/$f.summary"
  done
fi
if has table; then
  for m in gemma4-26b-a4b:g26 gemma4-e4b:e4b gemma4-31b:g31; do
    [ -f "/tmp/${m#*:}.gguf" ] ||
      step "synth_${m#*:}" $bin/hf2q synth --preset "${m%:*}" --quant q4_k_m --seed 1 --fast --force -o "/tmp/${m#*:}.gguf"
  done
  table() {  # table MODEL FLAGS...: one bench line per test
    echo "== $*"
    $bin/hf2q bench -m "/tmp/$1.gguf" --backend cuda "${@:2}" 2>&1 | grep -E '^(hf2q bench: context|\| gemma)'
  }
  {
    table g26 -p 512,4096,32768 -n '' -r 2 -ub 4096
    table g26 -p 512,4096,32768 -n '' -r 2 -ub 4096 --batch-copy off
    table g26 -p 4096,32768 -n '' -r 2 --batch-copy off
    table g26 -p '' -n 128 -b 1,8 -r 2
    table g26 -p '' -n 32 -b 32,64 -d 1024 -r 2 -ub 4096
    table g26 -p '' -n 32 -b 32,64 -d 1024 -r 2 -ub 4096 --batch-copy off
    table e4b -p 4096 -n 128 -b 1 -r 2 -ub 4096
    table g31 -p 4096 -n 128 -b 1 -r 2 -ub 4096
    table g31 -p '' -n 128 -b 1 -r 2 --no-head-copy
    table g31 -p 4096 -n '' -r 2 -ub 4096 --batch-copy on
    table g31 -p '' -n 32 -b 64 -d 1024 -r 1 -ub 4096
    table g31 -p '' -n 32 -b 64 -d 1024 -r 1 -ub 4096 --batch-copy on
  } 2>&1 | tee "$out/table.log"
fi
other_args="-p 4096 -n 128 -r 2 -ub 4096"
HF2Q_BENCH_ARGS2=
has bench31 && { bench g31 gemma4-31b "$other_args"; rm -f /tmp/g31.gguf; }
has benche4b && bench e4b gemma4-e4b "$other_args"
grep -h "parity \]" "$out/model.log" 2>/dev/null
printf '%s\n' "${summary[@]}"
