#!/usr/bin/env bash
# Fill bench/gpu/wheels/ with the pure-Python (and small binary) wheels that the GPU machine lacks:
# it has torch, transformers, numpy and pytest but no network. Run on a machine with network;
# the folder is git-ignored and travels to the GPU machine with the device tool's `carry`
# (64 MiB in all; this set is ~4 MiB). bench/gpu/validate.sh installs from it when present.
#
#   bash bench/gpu/fetch-wheels.sh            # Python 3.12, x86_64 (the H200 machine)
#   PYVER=3.11 bash bench/gpu/fetch-wheels.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dest="$root/bench/gpu/wheels"
pyver="${PYVER:-3.12}"
py="${PYTHON:-python3}"
mkdir -p "$dest"
"$py" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
  --python-version "$pyver" --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --no-deps -d "$dest" msgspec rich click markdown-it-py mdurl pygments py-spy 2>&1 \
  | { grep -v "is ignored: it is neither a file nor a directory" || true; }
size_kib=$(du -sk "$dest" | cut -f1)
echo "fetch-wheels: $(ls "$dest" | wc -l) wheels, $((size_kib / 1024)) MiB in $dest"
if [ "$size_kib" -gt $((60 * 1024)) ]; then
  echo "fetch-wheels: over 60 MiB: too large for the device tool's carry limit" >&2; exit 1
fi
