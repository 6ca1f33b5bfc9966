#!/usr/bin/env bash
# Packs the sources of a baseline commit for an A/B in one GPU call:
#   scripts/ab_base.sh REV          -> out/ab-base.tgz (git archive of REV)
# then on the GPU machine (the device tool: carry ["out/ab-base.tgz"]):
#   HF2Q_GPU_STEPS=ab HF2Q_BENCH_ARGS="..." scripts/gpu_check.sh
# builds the baseline beside the working tree and runs the same bench with both
# binaries on the same model file, one after the other (docs/performance.md: how
# each step's figure was measured).
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/ab_base.sh REV}
mkdir -p out
git archive --format=tar "$rev" src include tools bench fuzz tests CMakeLists.txt | gzip >out/ab-base.tgz
echo "out/ab-base.tgz: $(git rev-parse --short "$rev") ($(du -h out/ab-base.tgz | cut -f1))"
