"""The PL as Linux sees it: is it programmed, and how to program it (on the board, Python 3.10).

Mapping the node's registers while the PL holds no design makes the first load a bus error
(SIGBUS kills the process), so everything that maps ``/dev/mem`` first asks the FPGA manager
(``/sys/class/fpga_manager/fpga0/state`` reads ``operating`` once a bitstream is loaded).

Loading prefers ``xmutil`` (Kria's dfx-mgr front end: it applies the overlay, which sets the PL
clock and the AXI port widths, then loads ``<app>.bit.bin``) and falls back to PYNQ's
``Overlay`` (which reads the ``.hwh`` beside the ``.bit`` and sets the clocks from it).
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .core import DriverError

#: Name of the design on the board: file stem and xmutil app name.
DESIGN = "mcf"
#: Where Linux's FPGA manager reports whether the PL is programmed, and where xmutil
#: (dfx-mgr) looks for app folders (<dir>/<app>/{<app>.bit.bin, <app>.dtbo, shell.json}).
FPGA_MANAGER = "/sys/class/fpga_manager"
FIRMWARE_DIR = "/lib/firmware/xilinx"


def fpga_state(manager: str = FPGA_MANAGER) -> str:
    """The FPGA manager's state of the first FPGA (``operating`` when a design is loaded)."""
    root = Path(manager)
    devices = sorted(root.glob("fpga*")) if root.is_dir() else []
    if not devices:
        raise DriverError(f"no FPGA manager under {root}: not a Zynq UltraScale+ board running Linux")
    try:
        return (devices[0] / "state").read_text().strip()
    except OSError as e:
        raise DriverError(f"cannot read {devices[0] / 'state'}: {e.strerror}") from None


def require_programmed(manager: str = FPGA_MANAGER) -> None:
    """DriverError unless the PL holds a design (so mapping its registers cannot SIGBUS)."""
    state = fpga_state(manager)
    if state != "operating":
        raise DriverError(f"the PL is not programmed (FPGA manager state '{state}'): "
                          f"run `mcf board load mcf.bit` first")


def bitstream_files(bit: Path) -> dict[str, Path]:
    """The files a build leaves beside ``mcf.bit``: .hwh (PYNQ), .bit.bin + .dtbo + shell.json (xmutil)."""
    bit = Path(bit)
    return {"bit": bit, "hwh": bit.with_suffix(".hwh"), "bin": bit.with_name(bit.name + ".bin"),
            "dtbo": bit.with_suffix(".dtbo"), "shell": bit.with_name("shell.json")}


def load(bit: Path, firmware_dir: str = FIRMWARE_DIR, app: str = DESIGN, run=subprocess.run,
         timeout_s: float = 120) -> str:
    """Program the PL with ``bit`` (and its overlay); returns how ("xmutil" or "pynq")."""
    files = bitstream_files(bit)
    if not files["bit"].is_file():
        raise DriverError(f"{files['bit']}: no such bitstream")
    if shutil.which("xmutil"):
        for key in ("bin", "dtbo", "shell"):
            if not files[key].is_file():
                raise DriverError(f"{files[key]} missing: `mcf board build` writes it beside the .bit")
        dest = Path(firmware_dir) / app
        try:
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(files["bin"], dest / f"{app}.bit.bin")
            shutil.copyfile(files["dtbo"], dest / f"{app}.dtbo")
            shutil.copyfile(files["shell"], dest / "shell.json")
        except OSError as e:
            raise DriverError(f"cannot install the overlay into {dest}: {e.strerror} (run as root)") from None
        # an app already loaded (ours or another) must go first; unloading none is not an error
        run(["xmutil", "unloadapp"], capture_output=True, text=True, timeout=timeout_s)
        r = run(["xmutil", "loadapp", app], capture_output=True, text=True, timeout=timeout_s)
        if r.returncode:
            last = (r.stderr or r.stdout or "").strip().splitlines()[-1:] or ["no output"]
            raise DriverError(f"xmutil loadapp {app} failed (exit {r.returncode}): {last[0]}")
        return "xmutil"
    try:
        from pynq import Overlay   # Kria-PYNQ
    except ImportError:
        raise DriverError("neither xmutil nor PYNQ is available: run this on the KR260 "
                          "(Kria Ubuntu has xmutil; Kria-PYNQ has pynq)") from None
    if not files["hwh"].is_file():
        raise DriverError(f"{files['hwh']} missing: PYNQ needs the .hwh beside the .bit")
    Overlay(str(files["bit"]))
    return "pynq"


def linux_pl_clock_hz(path: str = "/sys/kernel/debug/clk/pl0_ref/clk_rate") -> int | None:
    """The rate Linux's clock framework set for pl_clk0 (debugfs, root only), or None."""
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None
