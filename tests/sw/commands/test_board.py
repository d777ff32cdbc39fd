"""`mcf board load / doctor / info` with fakes for the board: an FPGA manager sysfs folder, an
xmutil on PATH, a PYNQ module, and a file standing in for /dev/mem whose cycle counter runs at a
chosen clock rate on a fake clock (``time.sleep`` advances it, ``time.monotonic`` reads it): the
measured rate does not depend on the machine's load."""
import json
import os
import struct
import sys
import time
import types

import pytest

from mcf.spec.node import PL_CLOCK_HZ
from mcf.spec import REGISTERS, SPEC_VERSION, ErrorCause
from mcf.spec.regmap import ID_VALUE
from mcf.sw.cli import main

WINDOW = 1 << 16


@pytest.fixture
def manager(tmp_path):
    def make(state):
        root = tmp_path / "fpga_manager"
        (root / "fpga0").mkdir(parents=True, exist_ok=True)
        (root / "fpga0" / "state").write_text(state + "\n")
        return str(root)
    return make


class FakeNode:
    """A register file in a temporary file; ``clock_hz`` > 0 runs CYCLES on a fake clock (``with``)."""

    def __init__(self, path, clock_hz=0):
        self.path = path
        path.write_bytes(bytes(WINDOW))
        self.put("ID", ID_VALUE)
        self.put("VERSION", SPEC_VERSION)
        self.put("CAPS", 16 | (1 << 8))
        self.clock_hz = clock_hz

    def put(self, name, value):
        with open(self.path, "r+b") as f:
            f.seek(REGISTERS[name].offset)
            f.write(struct.pack("<I", value))

    def _advance(self, seconds):
        self._now += seconds
        c = int((self._now - self._t0) * self.clock_hz) + 12345
        self.put("CYCLES_HI", c >> 32)
        self.put("CYCLES_LO", c & 0xFFFF_FFFF)

    def __enter__(self):
        """With ``clock_hz`` > 0: ``time.sleep`` / ``time.monotonic`` on the fake clock until exit
        (the doctor's interval; any bounded wait still ends, since sleeping advances it)."""
        if self.clock_hz:
            self._t0 = self._now = 1000.0
            self._saved = time.sleep, time.monotonic
            time.sleep, time.monotonic = self._advance, lambda: self._now
            self._advance(0.0)
        return self

    def __exit__(self, *exc):
        if self.clock_hz:
            time.sleep, time.monotonic = self._saved


def board(*args, dev, mgr):
    return ["board", *args, "--base", "0", "--dev", str(dev), "--fpga-manager", mgr]


def test_doctor_all_good(tmp_path, manager, capsys):
    dev = tmp_path / "mem"
    with FakeNode(dev, clock_hz=PL_CLOCK_HZ):
        rc = main(board("doctor", "--interval", "1.0", "--json", dev=dev, mgr=manager("operating")))
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["ok"], out
    assert [c["check"] for c in out["checks"]] == ["pl", "node", "clock", "links"]
    measured = float(out["checks"][2]["detail"].split("measured ")[1].split(" MHz")[0])
    assert measured == round(PL_CLOCK_HZ / 1e6, 2)


def test_doctor_unprogrammed_pl_never_maps_memory(tmp_path, manager, capsys):
    """No bitstream loaded: the FPGA manager says so and /dev/mem is never opened (a mapping
    would SIGBUS); --dev points at nothing to prove it."""
    rc = main(board("doctor", dev=tmp_path / "does-not-exist", mgr=manager("unknown")))
    cap = capsys.readouterr()
    assert rc == 2 and "FAIL pl" in cap.out and "mcf board load" in cap.out
    assert cap.err.strip().count("\n") == 0 and "1 check(s) failed: pl" in cap.err
    rc = main(board("info", dev=tmp_path / "does-not-exist", mgr=manager("unknown")))
    assert rc == 2 and "the PL is not programmed (FPGA manager state 'unknown')" in capsys.readouterr().err


def test_doctor_finds_a_wrong_clock_and_link_errors(tmp_path, manager, capsys):
    dev = tmp_path / "mem"
    with FakeNode(dev, clock_hz=187_500_000) as node:      # what "200 MHz" really gives
        node.put(f"ERR_{ErrorCause.BAD_HEADER.name}", 3)
        rc = main(board("doctor", "--interval", "0.2", dev=dev, mgr=manager("operating")))
    cap = capsys.readouterr()
    clock = [l for l in cap.out.splitlines() if " clock " in l]
    assert rc == 2 and clock and clock[0].startswith("FAIL clock"), cap.out
    assert float(clock[0].split("measured ")[1].split(" MHz")[0]) == 187.5, clock
    assert "FAIL links" in cap.out and "BAD_HEADER': 3" in cap.out
    assert "2 check(s) failed: clock, links" in cap.err


def test_doctor_sfp_link(tmp_path, manager, capsys):
    """--sfp reads ETH_STATUS: link up passes; no module (and so no lock) fails naming it.  The
    fake's clock stands still (no timing thread: the result does not depend on the machine's
    load), so the clock check fails beside it."""
    from mcf.spec.regmap import LinkStatus
    dev = tmp_path / "mem"
    node = FakeNode(dev)
    node.put("ETH_STATUS", (1 << LinkStatus.BLOCK_LOCK) | (1 << LinkStatus.LINK_UP))
    rc = main(board("doctor", "--sfp", "--interval", "0.05", "--json", dev=dev, mgr=manager("operating")))
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert rc == 2 and out["checks"][-1] == {"check": "sfp", "ok": True,
                                             "detail": "ETH_STATUS: block_lock, link_up"}, out
    assert "1 check(s) failed: clock" in cap.err
    node.put("ETH_STATUS", (1 << LinkStatus.MODULE_ABSENT) | (1 << LinkStatus.RX_LOS))
    rc = main(board("doctor", "--sfp", "--interval", "0.05", dev=dev, mgr=manager("operating")))
    cap = capsys.readouterr()
    line = [l for l in cap.out.splitlines() if " sfp " in l]
    assert rc == 2 and line[0].startswith("FAIL sfp") and "module_absent, rx_los" in line[0], cap.out
    assert "2 check(s) failed: clock, sfp" in cap.err
    rc = main(board("doctor", "--interval", "0.05", dev=dev, mgr=manager("operating")))
    assert " sfp " not in capsys.readouterr().out        # without --sfp the link is not judged


def test_doctor_wrong_design(tmp_path, manager, capsys):
    dev = tmp_path / "mem"
    node = FakeNode(dev)
    node.put("ID", 0x12345678)
    assert main(board("doctor", dev=dev, mgr=manager("operating"))) == 2
    assert "FAIL node" in capsys.readouterr().out


def test_info_reads_a_node(tmp_path, manager, capsys):
    dev = tmp_path / "mem"
    node = FakeNode(dev)
    node.put(f"ERR_{ErrorCause.BAD_ROUTE.name}", 7)
    assert main(board("info", "--json", dev=dev, mgr=manager("operating"))) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["version"] == SPEC_VERSION and info["errors"]["BAD_ROUTE"] == 7 and info["errors"]["BAD_DST"] == 0
    node.put("ID", 0x12345678)
    assert main(board("info", dev=dev, mgr=manager("operating"))) == 2
    assert "no MCF node here" in capsys.readouterr().err


@pytest.fixture
def build_outputs(tmp_path):
    out = tmp_path / "build"
    out.mkdir()
    for name, data in (("mcf.bit", b"BIT"), ("mcf.bit.bin", b"BIN"), ("mcf.dtbo", b"DTBO"),
                       ("shell.json", b"{}"), ("mcf.hwh", b"<hwh/>")):
        (out / name).write_bytes(data)
    return out


def fake_xmutil(tmp_path, rc=0):
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    log = tmp_path / "xmutil.log"
    script = bindir / "xmutil"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n"
                      + (f"echo 'dfx-mgr: failed to load' >&2\n[ \"$1\" = loadapp ] && exit {rc}\n" if rc else "")
                      + "exit 0\n")
    script.chmod(0o755)
    return bindir, log


def test_load_with_xmutil_installs_the_overlay(tmp_path, build_outputs, monkeypatch, capsys):
    bindir, log = fake_xmutil(tmp_path)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    fw = tmp_path / "firmware"
    assert main(["board", "load", str(build_outputs / "mcf.bit"), "--firmware-dir", str(fw)]) == 0
    assert "with xmutil" in capsys.readouterr().out
    assert log.read_text().splitlines() == ["unloadapp", "loadapp mcf"]
    assert (fw / "mcf" / "mcf.bit.bin").read_bytes() == b"BIN" and (fw / "mcf" / "mcf.dtbo").read_bytes() == b"DTBO"
    assert (fw / "mcf" / "shell.json").is_file()


def test_load_xmutil_failure_is_one_line(tmp_path, build_outputs, monkeypatch, capsys):
    bindir, _ = fake_xmutil(tmp_path, rc=1)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    (build_outputs / "mcf.dtbo").unlink()
    assert main(["board", "load", str(build_outputs / "mcf.bit"), "--firmware-dir", str(tmp_path / "fw")]) == 2
    assert "mcf.dtbo missing" in capsys.readouterr().err
    (build_outputs / "mcf.dtbo").write_bytes(b"DTBO")
    assert main(["board", "load", str(build_outputs / "mcf.bit"), "--firmware-dir", str(tmp_path / "fw")]) == 2
    err = capsys.readouterr().err.strip()
    assert "xmutil loadapp mcf failed (exit 1): dfx-mgr: failed to load" in err and "\n" not in err


def test_load_falls_back_to_pynq(tmp_path, build_outputs, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    loaded = []
    monkeypatch.setitem(sys.modules, "pynq", types.SimpleNamespace(Overlay=lambda path: loaded.append(path)))
    assert main(["board", "load", str(build_outputs / "mcf.bit")]) == 0
    assert loaded == [str(build_outputs / "mcf.bit")] and "with pynq" in capsys.readouterr().out
    (build_outputs / "mcf.hwh").unlink()
    assert main(["board", "load", str(build_outputs / "mcf.bit")]) == 2
    assert "PYNQ needs the .hwh" in capsys.readouterr().err


def test_load_without_xmutil_or_pynq(tmp_path, build_outputs, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setitem(sys.modules, "pynq", None)
    assert main(["board", "load", str(build_outputs / "mcf.bit")]) == 2
    assert "neither xmutil nor PYNQ" in capsys.readouterr().err
    assert main(["board", "load", str(tmp_path / "nope.bit")]) == 2
    assert "no such bitstream" in capsys.readouterr().err
