#!/usr/bin/env bash
# Session 58: out/s58b.sh where the card is an H200; on any card, then, the CUPTI trace of main's (m) 64-sequence int8
# step, whole (the CSV, gzipped, for `scripts/trace_summary.py --list` here). out/s58build.sh's bundle.
#   run(carry=["out/bin58"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s58e.sh
cd "$(dirname "$0")/.."
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
case "$card" in *H200*) LIMIT=$(( ${LIMIT:-580} - 60 )) bash out/s58b.sh ;; esac
source out/device_lib.sh
[ -d build-v/m ] || unbundle out/bin58/bundle58.tar.xz m
[ -f /tmp/g26.gguf ] || synth_g26 /tmp/bund/hf2q_m
CUDA_INJECTION64_PATH=$PWD/out/bin58/libhf2q_cupti_trace.so HF2Q_TRACE_OUT=/tmp/trace-m.csv \
  timeout 50 build-v/m/bin/hf2q bench -m /tmp/g26.gguf --backend cuda -p '' -n 16 -b 64 -d 1024 -r 1 -ub 4096 \
  --cache-type int8 > /tmp/trace-m.log 2>&1
echo "trace rc=$?"
python3 scripts/trace_summary.py /tmp/trace-m.csv --skip 4 > $OUT/trace-m.txt 2>&1
head -8 $OUT/trace-m.txt | cut -c1-100
gzip -c /tmp/trace-m.csv > $OUT/trace-m.csv.gz; ls -l $OUT
el done
