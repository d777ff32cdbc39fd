"""``mcf docs``: regenerate docs/reference.md from the spec (``--check`` compares instead)."""
from __future__ import annotations

import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("docs", help="generate the wire-format / register-map reference",
                       description="Render docs/reference.md from mcf.spec, the one definition.")
    p.add_argument("-o", "--output", default="docs/reference.md", help="file to write (default: %(default)s)")
    p.add_argument("--check", action="store_true",
                   help="exit 1 if the file differs from what the spec renders (nothing written)")
    p.set_defaults(func=run)


def run(args) -> int:
    from mcf.spec.docgen import render
    text = render()
    path = Path(args.output)
    if args.check:
        if not path.exists() or path.read_text() != text:
            print(f"{path} is out of date: run `mcf docs`", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    from mcf.sw.cliutil import write_text
    write_text(path, text)
    print(f"wrote {path}")
    return 0
