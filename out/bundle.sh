#!/usr/bin/env bash
# bundle.sh OUT.tar.xz BIN...: strip copies of the binaries BIN and pack them as one tar in xz with a 256 MiB
# dictionary, for a device call's carry (session 56). Variants of one binary differ in a few kernels, so after
# the first each costs almost nothing: nine binaries (153 MB stripped) took 10.4 MB, where each alone in
# `xz -9` takes about 5.5 MB (two hf2q variants: 5.8 MB). The names must differ (copy variants to hf2q_NAME
# first). On the device: xz -dc OUT.tar.xz | tar xf - -C DIR (about 1 s).
set -euo pipefail
out=$1; shift
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
for f in "$@"; do
  [ -e "$d/$(basename "$f")" ] && { echo "bundle.sh: two binaries named $(basename "$f")"; exit 1; }
  strip -o "$d/$(basename "$f")" "$f"; done
tar cf - -C "$d" . | xz -9e --lzma2=dict=256MiB,preset=9e -T1 > "$out"
ls -l "$out"
