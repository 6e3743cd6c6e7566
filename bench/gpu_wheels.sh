#!/usr/bin/env bash
# Fetch the wheels bench/gpu_check.sh installs on a GPU machine (which reaches no package
# registry): every name in bench/gpu_wheels.txt, at the version this venv has, for
# CPython 3.12 on manylinux x86_64, into .whl/ (ignored by git; carry it with the tree).
# Prints each wheel and the total size, which must stay under 60 MiB.
#   bench/gpu_wheels.sh            # uses .venv/bin/python for the versions
#   PYTHON=python3 bench/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
DEST=.whl
LIMIT_MIB=60
# name==version for each listed name, from this venv (fails naming what is missing)
mapfile -t pins < <("$PY" bench/gpu_check.py pins)
rm -rf "$DEST.new" && mkdir -p "$DEST.new"
for pin in "${pins[@]}"; do
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$DEST.new" "$pin"
done
# one version of each: the folder is replaced whole, never added to
rm -rf "$DEST" && mv "$DEST.new" "$DEST"
"$PY" bench/gpu_check.py wheels --wheels "$DEST" --limit-mib "$LIMIT_MIB"
