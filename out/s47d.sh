#!/usr/bin/env bash
# Session 47's last device seconds: out/pool_probe.cu alone (the KV pool layouts' read rate).
#   mkdir -p $OUT && OUT=$OUT bash out/s47d.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/pool_probe out/pool_probe.cu && /tmp/pool_probe | tee $OUT/probe.txt
el probed
