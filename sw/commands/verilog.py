"""``mcf verilog BLOCK -o FILE``: write the Verilog of a registered hardware block."""
from __future__ import annotations

import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("verilog", help="write Verilog for a hardware block",
                       description="Write the Verilog of a registered block of mcf.hw. "
                                   "`mcf verilog --list` lists the blocks and their parameters.")
    p.add_argument("block", nargs="?", help="block name (see --list)")
    p.add_argument("-o", "--output", help="output file (default: standard output)")
    p.add_argument("-p", "--param", action="append", metavar="KEY=VALUE",
                   help="override a block parameter, e.g. -p data_width=128 (repeatable)")
    p.add_argument("--list", action="store_true", help="list the registered blocks")
    p.set_defaults(func=run)


def run(args) -> int:
    from mcf.hw import registry
    if args.list or not args.block:
        for info in registry.blocks().values():
            params = ", ".join(f"{k}={v}" for k, v in info.params.items())
            print(f"{info.name:<24} {info.doc}  [{params}]")
        return 0 if args.list else 2
    info = registry.get(args.block)
    text = info.verilog(**registry.parse_params(args.param))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text(text)
        print(f"wrote {args.output} ({len(text.splitlines())} lines)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
