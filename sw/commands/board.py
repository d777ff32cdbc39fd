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
                   help="network ports looped back (bring-up) or port 0 on the SFP+ 10G MAC")
    b.add_argument("--jobs", type=int, default=4, help="Vivado jobs (default: %(default)s)")
    b.add_argument("--vivado", help="path to the vivado executable (default: from PATH)")
    b.add_argument("--dry-run", action="store_true", help="write the project files, do not run Vivado")
    b.set_defaults(func=run_build)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run_build(args) -> int:
    from mcf.boards.kr260 import vivado
    from mcf.hw import registry

    component = registry.get(args.block).build(**registry.parse_params(args.param))
    files = vivado.write_project(component, vivado.BuildOptions(out=Path(args.out), network=args.network,
                                                                jobs=args.jobs))
    print(f"wrote the Vivado project inputs to {args.out}/ ({', '.join(f.name for f in files.values())})")
    if args.dry_run:
        return 0
    exe = vivado.find_vivado(args.vivado)
    if exe is None:
        raise OSError(f"vivado not found on PATH; the project is in {args.out}/: run "
                      f"`cd {args.out} && vivado -mode batch -source build.tcl` on a machine with Vivado")
    print(f"running {exe} (progress below; full log in {args.out}/vivado.log)", file=sys.stderr)
    rc = vivado.run_vivado(Path(args.out), exe)
    if rc:
        raise OSError(f"vivado failed (exit {rc}); see {args.out}/vivado.log")
    print(f"built {args.out}/mcf.bit, mcf.bit.bin, mcf.hwh")
    return 0
