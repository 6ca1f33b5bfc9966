#!/usr/bin/env bash
# Session 47's last device seconds: out/pool_probe.cu alone (the KV pool layouts' read rate).
#   mkdir -p $OUT && OUT=$OUT bash out/s47d.sh
cd "$(dirname "$0")/.."
source out/device_lib.sh
pool_probe
el probed
