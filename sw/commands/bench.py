"""``mcf bench NAME``: run a benchmark and print its figures (JSON with ``--json``)."""
from __future__ import annotations

import importlib
import json
import pkgutil

from mcf.sim import benchmarks


class _Unavailable:
    """A benchmark whose module needs a package this machine lacks (a board has no cocotb): the
    ``mcf`` command still starts, and running it says what is missing in one line."""

    def __init__(self, name: str, error: ImportError):
        self.NAME, self.HELP = name.replace("_", "-"), f"(unavailable here: {error})"
        self._error = error

    def add_arguments(self, parser) -> None:
        pass

    def run(self, args):
        raise OSError(f"benchmark {self.NAME} needs {self._error.name or 'a package'}, "
                      f"which is not installed here: {self._error}")


def discover() -> dict:
    found = {}
    for info in pkgutil.iter_modules(benchmarks.__path__):
        try:
            module = importlib.import_module(f"{benchmarks.__name__}.{info.name}")
        except ImportError as e:
            if e.name is not None and e.name.startswith("mcf"):
                raise               # our own import bug, not a missing package
            module = _Unavailable(info.name, e)
        if hasattr(module, "NAME"):
            found[module.NAME] = module
    return dict(sorted(found.items()))


def register(sub) -> None:
    p = sub.add_parser("bench", help="run a benchmark and print its figures",
                       description="Run a benchmark; figures are cycles or ratios (machines are noisy).")
    bsub = p.add_subparsers(dest="bench", metavar="NAME", title="benchmarks")
    for name, module in discover().items():
        bp = bsub.add_parser(name, help=module.HELP, description=module.HELP)
        bp.add_argument("--json", action="store_true", help="print the figures as one JSON object")
        module.add_arguments(bp)
        bp.set_defaults(func=lambda args, m=module: _run(m, args))
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _run(module, args) -> int:
    figures = module.run(args)
    if args.json:
        print(json.dumps(figures, indent=None, sort_keys=True))
    else:
        width = max((len(k) for k in figures), default=0)
        for key, value in figures.items():
            print(f"{key:<{width}}  {value}")
    return 0
