#!/usr/bin/env bash
# Makes sure the HDL tools the tests need are installed: Icarus Verilog (>= 11, runs the
# cocotb benches), Verilator (lint only; Debian's 5.006 is enough for --lint-only), tclsh
# (runs the KR260 build script against a mock of Vivado), dtc (compiles the KR260 overlay);
# and Debian's redis-server (the RESP server the prefix KV tier's tests and `mcf kv replay`
# start on loopback ports).
# Installs missing ones with apt-get (directly as root, with sudo otherwise).
set -euo pipefail

missing=()
command -v iverilog >/dev/null 2>&1 || missing+=(iverilog)
command -v verilator >/dev/null 2>&1 || missing+=(verilator)
command -v tclsh >/dev/null 2>&1 || missing+=(tcl)
command -v dtc >/dev/null 2>&1 || missing+=(device-tree-compiler)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "mcf: installing ${missing[*]} with apt-get" >&2
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO="sudo -n"
else
  echo "mcf: error: ${missing[*]} missing and cannot install (not root, no passwordless sudo): run 'sudo apt-get install ${missing[*]}'" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
iver=$(iverilog -V 2>/dev/null | head -n1 | sed -E 's/.*version ([0-9]+).*/\1/')
if [ "${iver:-0}" -lt 11 ]; then
  echo "mcf: error: Icarus Verilog ${iver:-?} is too old; cocotb 2 needs >= 11" >&2
  exit 1
fi
