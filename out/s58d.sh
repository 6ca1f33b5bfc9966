#!/usr/bin/env bash
# Session 58: out/s58b.sh only where the card is an H200 (its figures are the summary's); elsewhere it says which card
# came and stops.
#   run(carry=["out/bin58"]): mkdir -p $OUT && OUT=$OUT LIMIT=<timeout_s-20> bash out/s58d.sh
cd "$(dirname "$0")/.."
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "card: $card"
case "$card" in *H200*) exec bash out/s58b.sh ;; *) exit 0 ;; esac
