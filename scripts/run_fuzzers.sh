#!/usr/bin/env bash
# Runs every built libFuzzer target for a bounded time (HF2Q_FUZZ_SECONDS, default 30)
# starting from its seed corpus in fuzz/corpus/<name>/. Fails on any crash.
set -euo pipefail
build=${1:-build-fuzz}
secs=${HF2Q_FUZZ_SECONDS:-30}
root="$(cd "$(dirname "$0")/.." && pwd)"
status=0
for bin in "$build"/bin/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  work=$(mktemp -d)
  seeds="$root/fuzz/corpus/${name#fuzz_}"
  [ -d "$seeds" ] && cp -r "$seeds"/. "$work"/ 2>/dev/null || true
  echo "fuzz: $name for ${secs}s"
  if ! "$bin" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=0 \
       "$work" >"$work.log" 2>&1; then
    echo "fuzz: $name FAILED"; tail -50 "$work.log"; status=1
  else
    grep -E "^#[0-9]+.*DONE" "$work.log" | tail -1 || true
  fi
  rm -rf "$work" "$work.log"
done
exit $status
