#!/usr/bin/env bash
# transformers' continuous batching (hf-cb, hf-cb-async) beside hostgap's own loop (hf) on the
# tiny preset, CPU, batch 1 and 4: each pair measured together (interleaved), results JSON
# here (the per-step anatomy rows trimmed: trim.py), run directories and database under $OUT (default: a temporary folder). The load
# average before and after each pair goes to load.txt. Usage: bash measure.sh [OUT]
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
OUT="${1:-$(mktemp -d)}"
HG="$ROOT/.venv/bin/hostgap"
: > "$HERE/load.txt"
for b in 1 4; do
  for pair in hf,hf-cb hf-cb,hf-cb-async; do
    name="b${b}_${pair//,/_vs_}"
    echo "$name before: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$HERE/load.txt"
    "$HG" measure -p tiny --device cpu -b "$b" --engine "$pair" --budget 300 --retries 3 \
      -o "$OUT/runs" --db "$OUT/runs.sqlite" --json -q > "$HERE/$name.json" 2> "$HERE/$name.stderr"
    echo "$name exit $? after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$HERE/load.txt"
    [ -s "$HERE/$name.stderr" ] || rm -f "$HERE/$name.stderr"
    "$ROOT/.venv/bin/python" "$HERE/trim.py" "$HERE/$name.json"
  done
done
echo "runs in $OUT"
