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
                                    "build.tcl} and run `vivado -mode batch -source build.tcl`.")
    b.add_argument("--out", default="build/kr260", help="output folder (default: %(default)s)")
    b.add_argument("--block", default="node", help="registered top block (default: %(default)s)")
    b.add_argument("-p", "--param", action="append", metavar="KEY=VALUE", help="block parameter override")
    b.add_argument("--network", choices=["loopback", "sfp"], default="loopback",
                   help="network ports looped back (bring-up) or port 0 on the SFP+ cage "
                        "(needs issue 16's open 10GBASE-R PCS/MAC)")
    b.add_argument("--jobs", type=int, default=4, help="Vivado jobs (default: %(default)s)")
    b.add_argument("--vivado", help="path to the vivado executable (default: from PATH)")
    b.add_argument("--dry-run", action="store_true", help="write the project files, do not run Vivado")
    b.set_defaults(func=run_build)
    i = bsub.add_parser("info", help="on the board: read the node's ID, status and error counters",
                        description="Read ID, VERSION, CAPS, STATUS and every error counter of the "
                                    "node through the driver (/dev/mem mmap or PYNQ MMIO).")
    i.add_argument("--base", type=lambda v: int(v, 0), default=DEFAULT_BASE,
                   help="physical address of the node's registers (default: %(default)#x, "
                        "M_AXI_HPM0_FPD as build.tcl assigns it)")
    i.add_argument("--backend", choices=["devmem", "pynq"], default="devmem", help="register access")
    i.add_argument("--dev", default="/dev/mem", help="memory device for --backend devmem")
    i.add_argument("--json", action="store_true", help="print one JSON object")
    i.set_defaults(func=run_info)

    ld = bsub.add_parser("load", help="on the board: program the PL with mcf.bit (PYNQ or fpgautil)",
                         description="Load a bitstream: pynq.Overlay when PYNQ is installed (needs "
                                     "the .hwh beside the .bit), else fpgautil with the .bit.bin.")
    ld.add_argument("bitstream", help="path to mcf.bit (mcf.hwh / mcf.bit.bin beside it)")
    ld.set_defaults(func=run_load)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


#: Where Vivado's assign_bd_address puts the first slave on M_AXI_HPM0_FPD.
DEFAULT_BASE = 0xA000_0000


def run_info(args) -> int:
    import json

    from mcf.sw.driver import MmapBackend, SyncDriver
    if args.backend == "pynq":
        from mcf.sw.driver import PynqBackend
        backend = PynqBackend(args.base)
    else:
        backend = MmapBackend(args.base, path=args.dev)
    drv = SyncDriver(backend)
    drv.check_id()
    info = {"base": args.base, "version": drv.read32("VERSION"), "caps": drv.read_fields("CAPS"),
            "status": drv.read_fields("STATUS"),
            "errors": {c.name: v for c, v in drv.read_errors().items()}}
    if args.json:
        print(json.dumps(info))
    else:
        print(f"MCF node at {args.base:#x}: spec version {info['version']}")
        for key in ("caps", "status", "errors"):
            print(f"  {key}: " + ", ".join(f"{k}={v}" for k, v in info[key].items()))
    return 0


def run_load(args) -> int:
    import shutil
    import subprocess
    bit = Path(args.bitstream)
    if not bit.is_file():
        raise OSError(f"{bit}: no such bitstream")
    try:
        from pynq import Overlay   # PYNQ on the board
    except ImportError:
        Overlay = None
    if Overlay is not None:
        if not bit.with_suffix(".hwh").is_file():
            raise OSError(f"{bit.with_suffix('.hwh')} missing: PYNQ needs the .hwh beside the .bit")
        Overlay(str(bit))
        print(f"loaded {bit} with PYNQ")
        return 0
    binfile = bit.with_name(bit.name + ".bin")
    if shutil.which("fpgautil") is None:
        raise OSError("neither PYNQ nor fpgautil is available: run this on the KR260")
    if not binfile.is_file():
        raise OSError(f"{binfile} missing (build.tcl writes it with bootgen)")
    subprocess.run(["fpgautil", "-b", str(binfile)], check=True, timeout=120)
    print(f"loaded {binfile} with fpgautil")
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
    component = registry.get(args.block).build(**registry.parse_params(args.param))
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
