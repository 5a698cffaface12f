#!/usr/bin/env bash
# Developer helper: rebuild the extension and swap it in atomically (rename), so processes
# still running the old module (long tests) are not hit by a file rewritten under them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
out=$(mktemp -d)
"$PY" setup.py -q build_ext --build-lib "$out" --build-temp "$out/tmp" >/dev/null
so=$(ls "$out"/mxhorovod/_core*.so)
cp "$so" "mxhorovod/.$(basename "$so").new"
mv -f "mxhorovod/.$(basename "$so").new" "mxhorovod/$(basename "$so")"
rm -rf "$out"
echo "rebuilt mxhorovod/$(basename "$so")"
