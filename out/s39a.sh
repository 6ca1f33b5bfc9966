#!/usr/bin/env bash
# Session 39 (no device lent) prepared this for the next session's first call, on main:
# the CUDA top-k kernel (topk_rows, sampling.cu) and the engine's use of it
# (-DHF2Q_CUDA_TOPK=ON), never run on a GPU yet, and generate --prompts (continuous
# batching) on the H200. If every test passes, HF2Q_CUDA_TOPK's default can become ON.
# At most 8 files under $OUT come back: logs of the build and sanitizers stay in /tmp.
set -uo pipefail
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/gpu}
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_CUDA=ON -DHF2Q_CUDA_TOPK=ON > /tmp/configure.log 2>&1
cmake --build build-gpu -j16 --target hf2q test_cuda_sampling test_model test_generation test_profiling \
  > /tmp/build.log 2>&1 || { grep -B2 -A12 "error" /tmp/build.log | head -40; exit 1; }
bin=build-gpu/bin
el built
timeout 240 $bin/test_cuda_sampling > $OUT/test_sampling.log 2>&1; echo "test_cuda_sampling rc=$?"; grep -E "FAILED|PASSED|Failure" $OUT/test_sampling.log | head -12
timeout 150 $bin/test_model --gtest_filter='*DecodeArgmax*:*Graph*:*Batching*' > $OUT/test_model.log 2>&1; echo "test_model rc=$?"; grep -E "FAILED|PASSED|SKIPPED \]" $OUT/test_model.log | head -8
timeout 120 $bin/test_generation > $OUT/test_generation.log 2>&1; echo "test_generation rc=$?"; grep -E "FAILED|PASSED|SKIPPED \]" $OUT/test_generation.log | head -5
timeout 60 $bin/test_profiling --gtest_filter='*TopK*:*Argmax*' 2>&1 | grep -E "FAILED|PASSED"
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 1 $bin/test_cuda_sampling --gtest_filter='*TopkRowsGrid*:*TopkRowsZero*' > /tmp/$tool.log 2>&1; echo "$tool rc=$?"; tail -2 /tmp/$tool.log | tee -a $OUT/sanitizers.log
done
el tests
timeout 60 $bin/test_cuda_sampling --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Perf' 2>&1 | grep perf | tee $OUT/perf.txt
[ -f /tmp/g26.gguf ] || $bin/hf2q synth --preset gemma4-26b-a4b --quant q4_k_m --seed 1 --fast --force -o /tmp/g26.gguf > /dev/null 2>&1
b() { echo "$* :: $(timeout 120 $bin/hf2q bench -m /tmp/g26.gguf --backend cuda "$@" 2>&1 | grep -E '^\| gemma' | cut -d'|' -f6-7 | tr '\n' ' ')"; }
{ b -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096
  b -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --no-pipeline
  b -p '' -n 32 -b 64 -d 1024 -r 2 -ub 4096 --top-k 64
  b -p '' -n 128 -b 1 -r 2 --no-pipeline
  b -p '' -n 128 -b 1 -r 2 --top-k 64; } | tee $OUT/bench.txt
el bench
# generate --prompts: 64 requests of 1,024 random ids, 32 tokens each, greedy and top-k 64.
python3 -c "
import json, random
random.seed(1)
for i in range(64): print(json.dumps({'token_ids': [2] + [random.randrange(3, 262144) for _ in range(1023)]}))
" > /tmp/prompts.jsonl
for flags in "--temp 0" "--temp 1 --top-k 64 --top-p 0.95" "--temp 1 --top-k 64 --repeat-penalty 1.1"; do
  echo "== $flags"; timeout 150 $bin/hf2q generate -m /tmp/g26.gguf --backend cuda --prompts /tmp/prompts.jsonl -n 32 -np 64 \
    -ub 4096 --batch-tokens 4096 --json $flags 2>&1 >/dev/null | tail -3
done | tee $OUT/generate.txt
el done
