#!/usr/bin/env bash
# The main job on a small built-in model: installs dependencies, builds hf2q
# (Release), converts the tiny Gemma 4 MoE checkpoint in tests/fixtures/moe to GGUF,
# shows it with `hf2q info` and generates a continuation of a token prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHF2Q_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" --target hf2q
mkdir -p out
./build/bin/hf2q convert tests/fixtures/moe -o out/tiny-moe.gguf --quant bf16 --force
./build/bin/hf2q info out/tiny-moe.gguf --no-tensors
./build/bin/hf2q generate -m out/tiny-moe.gguf --token-ids 2,118,5,279,41 -n 16 --json
