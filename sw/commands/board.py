"""``mcf board``: build the KR260 bitstream (needs Vivado), load it and talk to it on the board."""
from __future__ import annotations

import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("board", help="KR260: build the bitstream, load it, query the node",
                       description="Kria KR260 board flow. `build` writes the Vivado project "
                                   "(block design: PS8 + MCF node) and runs Vivado when it is on PATH.")
    bsub = p.add_subparsers(dest="board_cmd", metavar="ACTION", title="actions")

    b = bsub.add_parser("build", help="generate the Vivado project and build mcf.bit / .hwh",
                        description="Write build/kr260/{mcf_node.v, mcf_node_top.v, params.tcl, "
                                    "build.tcl, kr260.xdc, the overlay} (with --network sfp also eth.tcl, "
                                    "eth10g.tcl, mcf_eth10g_gt.v, mcf_top.v) and run "
                                    "`vivado -mode batch -source build.tcl`.")
    b.add_argument("--out", default="build/kr260", help="output folder (default: %(default)s)")
    b.add_argument("--block", default=None,
                   help="registered top block (default: node, or eth_node with --network sfp)")
    b.add_argument("-p", "--param", action="append", metavar="KEY=VALUE", help="block parameter override")
    b.add_argument("--network", choices=["loopback", "sfp"], default="loopback",
                   help="network ports looped back (bring-up), or the node's 10GBASE-R port "
                        "(eth_node: our PCS/MAC + the GTH transceiver wizard) on the SFP+ cage")
    b.add_argument("--jobs", type=int, default=4, help="Vivado jobs (default: %(default)s)")
    b.add_argument("--vivado", help="path to the vivado executable (default: from PATH)")
    b.add_argument("--dry-run", action="store_true", help="write the project files, do not run Vivado")
    b.set_defaults(func=run_build)
    i = bsub.add_parser("info", help="on the board: read the node's ID, status and error counters",
                        description="Read ID, VERSION, CAPS, STATUS and every error counter of the "
                                    "node through the driver (/dev/mem mmap or PYNQ MMIO), after checking "
                                    "that the PL is programmed.")
    _board_args(i)
    i.add_argument("--json", action="store_true", help="print one JSON object")
    i.set_defaults(func=run_info)

    d = bsub.add_parser("doctor", help="on the board: check PL state, node ID/version, clock and links",
                        description="Check, in order: the FPGA manager says the PL is programmed (before "
                                    "mapping /dev/mem, so no SIGBUS), the node's ID and VERSION, its clock "
                                    "(CYCLES over a measured wall-clock interval against the design's PL "
                                    "clock), and its links (error counters).  Exit 2 if a check fails.")
    _board_args(d)
    d.add_argument("--interval", type=float, default=0.5,
                   help="seconds to count clock cycles over (default: %(default)s)")
    d.add_argument("--sfp", action="store_true",
                   help="the design was built with --network sfp: also check the 10GBASE-R link "
                        "(ETH_STATUS: module present, signal, no TX fault, block lock, link up)")
    d.add_argument("--json", action="store_true", help="print one JSON object")
    d.set_defaults(func=run_doctor)

    ld = bsub.add_parser("load", help="on the board: program the PL (xmutil, else PYNQ)",
                         description="Load mcf.bit: with xmutil (Kria Ubuntu), install mcf.bit.bin, "
                                     "mcf.dtbo and shell.json into FIRMWARE_DIR/mcf and `xmutil loadapp "
                                     "mcf` (the overlay sets the PL clock and AXI widths); without it, "
                                     "PYNQ's Overlay with the .hwh beside the .bit.")
    ld.add_argument("bitstream", help="path to mcf.bit (mcf.hwh, mcf.bit.bin, mcf.dtbo, shell.json beside it)")
    ld.add_argument("--firmware-dir", default=None, help="xmutil's app folder root (default: /lib/firmware/xilinx)")
    ld.set_defaults(func=run_load)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _board_args(parser) -> None:
    from mcf.boards.kr260.ps import FPGA_MANAGER, REGS_BASE
    from mcf.sw.cliutil import integer
    parser.add_argument("--base", type=integer(0, (1 << 40) - 1, step=4), default=REGS_BASE,
                        help="physical address of the node's registers (default: %(default)#x, "
                             "M_AXI_HPM0_FPD as build.tcl assigns it)")
    parser.add_argument("--backend", choices=["devmem", "pynq"], default="devmem", help="register access")
    parser.add_argument("--dev", default="/dev/mem", help="memory device for --backend devmem")
    parser.add_argument("--fpga-manager", default=FPGA_MANAGER,
                        help="the FPGA manager's sysfs folder (default: %(default)s)")


def _driver(args):
    from mcf.sw.driver import MmapBackend, SyncDriver
    from mcf.sw.driver.fpga import require_programmed
    require_programmed(args.fpga_manager)          # before any mapping: no SIGBUS on an empty PL
    if args.backend == "pynq":
        from mcf.sw.driver import PynqBackend
        return SyncDriver(PynqBackend(args.base))
    return SyncDriver(MmapBackend(args.base, path=args.dev))


def run_info(args) -> int:
    drv = _driver(args)
    drv.check_id()
    info = {"base": args.base, "version": drv.read32("VERSION"), "caps": drv.read_fields("CAPS"),
            "status": drv.read_fields("STATUS"),
            "errors": {c.name: v for c, v in drv.read_errors().items()}}
    if args.json:
        print(_dumps(info))
    else:
        print(f"MCF node at {args.base:#x}: spec version {info['version']}")
        for key in ("caps", "status", "errors"):
            print(f"  {key}: " + ", ".join(f"{k}={v}" for k, v in info[key].items()))
    return 0


def run_doctor(args) -> int:
    """Each check prints one line; the first failure that makes the rest meaningless stops."""
    import time

    from mcf.spec.node import PL_CLOCK_HZ
    from mcf.spec import SPEC_VERSION
    from mcf.spec.regmap import ID_VALUE
    from mcf.sw.driver import DriverError
    from mcf.sw.driver.fpga import fpga_state, linux_pl_clock_hz

    if not 0.01 <= args.interval <= 60:
        raise ValueError(f"--interval {args.interval}: must be in [0.01, 60] s")
    checks: list[dict] = []

    def report(name, ok, detail):
        checks.append({"check": name, "ok": ok, "detail": detail})
        if not args.json:
            print(f"{'ok  ' if ok else 'FAIL'} {name:8s} {detail}")
        return ok

    def finish():
        if args.json:
            print(_dumps({"ok": all(c["ok"] for c in checks), "checks": checks}))
        failed = [c["check"] for c in checks if not c["ok"]]
        if failed:
            raise OSError(f"doctor: {len(failed)} check(s) failed: {', '.join(failed)}")
        return 0

    try:
        state = fpga_state(args.fpga_manager)
    except DriverError as e:
        report("pl", False, str(e))
        return finish()
    if not report("pl", state == "operating", f"FPGA manager state '{state}'"
                  + ("" if state == "operating" else ": run `mcf board load mcf.bit`")):
        return finish()
    drv = _driver(args)
    ident, version = drv.read32("ID"), drv.read32("VERSION")
    if not report("node", ident == ID_VALUE and version == SPEC_VERSION,
                  f"ID {ident:#010x} (expected {ID_VALUE:#010x}), VERSION {version:#010x} (this runtime: {SPEC_VERSION:#010x})"
                  f" at {args.base:#x}"):
        return finish()
    c0, t0 = drv.cycles(), time.monotonic()
    time.sleep(args.interval)
    c1, t1 = drv.cycles(), time.monotonic()
    hz = (c1 - c0) / (t1 - t0)
    linux = linux_pl_clock_hz()
    report("clock", abs(hz - PL_CLOCK_HZ) <= 0.01 * PL_CLOCK_HZ,
           f"measured {hz / 1e6:.2f} MHz over {t1 - t0:.3f} s (design: {PL_CLOCK_HZ / 1e6:g} MHz"
           + (f", Linux pl0_ref: {linux / 1e6:g} MHz)" if linux else ")"))
    caps = drv.read_fields("CAPS")
    errors = {c.name: v for c, v in drv.read_errors().items() if v}
    report("links", not errors, f"{caps['net_ports']} network port(s), "
           + (f"errors counted: {errors}" if errors else "no error counted"))
    if args.sfp:
        from mcf.spec.regmap import LinkStatus
        status = drv.link_status()
        flags = [s.name.lower() for s in LinkStatus if status[s]]
        report("sfp", status[LinkStatus.LINK_UP],
               "ETH_STATUS: " + (", ".join(flags) if flags else "nothing set (no block lock)")
               + ("" if status[LinkStatus.LINK_UP] else
                  ": check the module, the fibre/cable and the peer (docs/eth.md)"))
    return finish()


def run_load(args) -> int:
    from mcf.boards.kr260.ps import FIRMWARE_DIR
    from mcf.sw.driver.fpga import load
    how = load(Path(args.bitstream), firmware_dir=args.firmware_dir or FIRMWARE_DIR)
    print(f"loaded {args.bitstream} with {how}")
    return 0


def run_build(args) -> int:
    from mcf.boards.kr260 import vivado
    from mcf.hw import registry

    exe = None
    if not args.dry_run:
        exe = vivado.find_vivado(args.vivado)
        if exe is None:
            raise OSError("vivado not found on PATH (or --vivado); `mcf board build --dry-run` writes the "
                          "project for a machine with Vivado, see docs/board.md")
    block = args.block or ("eth_node" if args.network == "sfp" else "node")
    info = registry.get(block)
    component = info.build(**registry.parse_params(args.param, info))
    files = vivado.write_project(component, vivado.BuildOptions(out=Path(args.out), network=args.network,
                                                                jobs=args.jobs))
    print(f"wrote the Vivado project inputs and the overlay to {args.out}/ "
          f"({', '.join(f.name for f in files.values())})")
    if args.dry_run:
        return 0
    print(f"running {exe} (progress below; full log in {args.out}/vivado.log)", file=sys.stderr)
    rc = vivado.run_vivado(Path(args.out), exe)
    if rc:
        raise OSError(f"vivado failed (exit {rc}); see {args.out}/vivado.log")
    print(f"built {args.out}/mcf.bit, mcf.hwh (PYNQ), mcf.bit.bin + mcf.dtbo + shell.json (xmutil), mcf.xsa")
    return 0


def _dumps(obj, **kwargs) -> str:
    """Strict JSON (``mcf.sw.cliutil.dumps``: NaN/Infinity become null)."""
    from mcf.sw.cliutil import dumps
    return dumps(obj, **kwargs)
