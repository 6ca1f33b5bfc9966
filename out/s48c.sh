#!/usr/bin/env bash
# For the next H200 (then out/s48d.sh): out/pipe_probe.cu (pipeline depth × a tile's arithmetic,
# read rate; seconds), then out/s48b.sh (the pool probe, the warp kernel's knock-outs against
# main; about 2 minutes on an H100), so the H100's figures of session 48 have H200 counterparts.
#   mkdir -p $OUT && OUT=$OUT bash out/s48c.sh
cd "$(dirname "$0")/.."
export OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
nvcc -std=c++17 -O3 -arch=sm_90a -o /tmp/pipe_probe out/pipe_probe.cu && /tmp/pipe_probe | tee $OUT/pipe.txt
bash out/s48b.sh
