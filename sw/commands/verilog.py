"""``mcf verilog BLOCK -o FILE``: write the Verilog of a registered hardware block."""
from __future__ import annotations

import sys


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
    from mcf.sw.cliutil import check_output, write_text
    info = registry.get(args.block)
    params = registry.parse_params(args.param, info)
    if args.output:
        check_output(args.output)
    text = info.verilog(**params)
    if args.output:
        write_text(args.output, text)
        print(f"wrote {args.output} ({len(text.splitlines())} lines)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
