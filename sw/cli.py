"""The ``mcf`` command.

Subcommands are discovered: every module in ``mcf.sw.commands`` defines
``register(subparsers)`` and sets ``func`` on its parser; ``func(args)`` returns the exit
code.  Options are typed and range-checked as they are parsed (``mcf.sw.cliutil``).

Every failure is one line on stderr: errors a user can cause (bad options, ``UserError``,
``ValueError``, ``OSError``: files, simulators, boards) print ``mcf: error: ...`` and exit 2;
anything else is a bug and prints ``mcf: internal error: ...`` (exit 1) with the hint to rerun
with ``--debug`` (anywhere on the command line, or ``MCF_DEBUG=1``), which shows the
traceback.  Output piped into a reader that stops early (``mcf ... | head``) ends quietly.
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

import mcf
from mcf.sw import commands

#: Exceptions that mean "the input or the environment is wrong", not "the code is wrong".
USER_ERRORS = (ValueError, OSError)


class UsageError(Exception):
    """A command line argparse refused."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block): ``mcf: error: ... (see --help)``."""

    def error(self, message):
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mcf",
        description="MCF: long-context LLM inference on a cluster of Kria KR260 FPGA boards.",
        epilog="Errors are one line (exit 2); --debug anywhere on the command line (or MCF_DEBUG=1) "
               "shows the traceback of a failure.",
    )
    parser.add_argument("--version", action="version", version=f"mcf {mcf.__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of a failure (also accepted after the subcommand)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def one_line(text) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return " | ".join(lines) if lines else "(no message)"


def _stdout_is_closed() -> bool:
    """True when standard output is a pipe whose reader has gone (``| head``)."""
    try:
        import select
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, ValueError, OSError):   # no real file descriptor (tests capture it)
        return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not complain."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):
        pass


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    head = argv[: argv.index("--")] if "--" in argv else argv
    debug = bool(os.environ.get("MCF_DEBUG")) or "--debug" in head
    if "--debug" in head:
        argv.remove("--debug")
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except UsageError as exc:
        print(f"mcf: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mcf: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if _stdout_is_closed():
            _silence_stdout()
            return 141                     # 128 + SIGPIPE, what the shell reports for `yes | head`
        if debug:
            raise
        print(f"mcf: error: {one_line(sys.exc_info()[1])}", file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        if debug:
            raise
        print(f"mcf: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:               # a bug: still one line, the traceback on request
        if debug:
            raise
        print(f"mcf: internal error: {type(exc).__name__}: {one_line(exc)} "
              f"(a bug in mcf; rerun with --debug for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
