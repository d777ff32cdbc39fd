"""The ``mcf`` command.

Subcommands are discovered: every module in ``mcf.sw.commands`` defines
``register(subparsers)`` and sets ``func`` on its parser; ``func(args)`` returns the exit
code.  Errors a user can cause (``ValueError``, ``OSError``) print as one line and exit 2;
set ``MCF_DEBUG=1`` to see the traceback instead.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

import mcf
from mcf.sw import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcf",
        description="MCF: long-context LLM inference on a cluster of Kria KR260 FPGA boards.",
    )
    parser.add_argument("--version", action="version", version=f"mcf {mcf.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("mcf: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError, KeyError) as exc:
        if os.environ.get("MCF_DEBUG"):
            raise
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"mcf {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
