"""What every ``mcf`` command shares: typed options checked before any work, strict JSON, and
output files written atomically, only after the inputs were validated.

Options::

    p.add_argument("--seq", type=integer(1, MAX_SEQ), required=True)
    p.add_argument("--nodes", type=integer_list(1, 1024))
    p.add_argument("--link-gbps", type=number(0, 1e4, open_lo=True))

A bad value is argparse's one-line error (``mcf: error: argument --seq: ...``, exit 2).  The
ranges are ``mcf.spec.params.Range``, the mechanism the hardware blocks declare their
parameters with.

Output::

    print(dumps(figures))                  # strict JSON: NaN / Infinity become null
    check_output(args.out)                 # before the work: the folder exists, no directory there
    with atomic_output(args.out) as tmp:   # after it: write tmp, renamed over args.out on success
        fig.savefig(tmp)
    with atomic_directory(args.out, force=args.force) as tmp: ...   # a checkpoint folder

Pure Python 3.10 (the board's PS runs it).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from mcf.spec.bits import SpecError
from mcf.spec.params import Range, parse_int

from .errors import UserError

INT64_MAX = (1 << 63) - 1


# --- typed options -----------------------------------------------------------------------------
def integer(lo: int = -INT64_MAX - 1, hi: int = INT64_MAX, *, pow2: bool = False, step: int = 1,
            zero: bool = False):
    """argparse ``type=``: an integer in a ``Range``."""
    r = Range(lo, hi, pow2=pow2, step=step, zero=zero)

    def parse(text: str) -> int:
        try:
            value = parse_int(text, "value")
        except SpecError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value not in r:
            raise argparse.ArgumentTypeError(f"{value} is out of range: must be {r.describe()}")
        return value
    parse.__name__ = "integer"
    return parse


def integer_list(lo: int = -INT64_MAX - 1, hi: int = INT64_MAX, *, pow2: bool = False):
    """argparse ``type=``: one integer or a comma list (``2,4,8``), each in range."""
    one = integer(lo, hi, pow2=pow2)

    def parse(text: str) -> list[int]:
        items = [t for t in text.replace(" ", "").split(",")]
        if not text.strip() or any(t == "" for t in items):
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer or a comma list of integers")
        return [one(t) for t in items]
    parse.__name__ = "integer list"
    return parse


def number(lo: float = -math.inf, hi: float = math.inf, *, open_lo: bool = False, open_hi: bool = False):
    """argparse ``type=``: a finite float in [lo, hi] (``open_lo``/``open_hi``: excluded)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        bad_lo = value <= lo if open_lo else value < lo
        bad_hi = value >= hi if open_hi else value > hi
        if not math.isfinite(value) or bad_lo or bad_hi:
            left = "(" if open_lo else "["
            right = ")" if open_hi else "]"
            raise argparse.ArgumentTypeError(f"{text} is out of range: must be a finite number in "
                                             f"{left}{lo:g}, {hi:g}{right}")
        return value
    parse.__name__ = "number"
    return parse


def check_int(name: str, value, lo: int, hi: int = INT64_MAX, **kw) -> int:
    """A library-level check with the same wording: ``UserError`` unless ``value`` fits."""
    try:
        return Range(lo, hi, **kw).check(name, value)
    except SpecError as e:
        raise UserError(str(e)) from None


# --- strict JSON -------------------------------------------------------------------------------
def _plain(obj):
    """JSON-ready copy: numpy scalars and arrays as Python values, non-finite floats as None,
    tuples as lists, enums by name, paths as text."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj
    if isinstance(obj, dict):
        return {(k if isinstance(k, str) else str(_plain(k))): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return _plain(_default(obj))


def _default(obj):
    import enum
    if isinstance(obj, enum.Enum):
        return obj.value if isinstance(obj.value, (str, int, float)) else obj.name
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):            # numpy scalar or array
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def dumps(obj, **kwargs) -> str:
    """``json.dumps`` that always writes strict JSON (RFC 8259): NaN and +-Infinity, which
    ``json`` would write as bare words no parser accepts, become ``null``."""
    try:   # the C encoder when the object is plain already (plans with events are large)
        return json.dumps(obj, allow_nan=False, default=_default, **kwargs)
    except ValueError:
        return json.dumps(_plain(obj), allow_nan=False, **kwargs)


# --- output files ------------------------------------------------------------------------------
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_output(path, *, force: bool = True, what: str = "output") -> Path:
    """Refuse an output path before any work: its folder must exist (or be creatable), it
    must not be a folder itself, and without ``force`` it must not exist."""
    p = Path(path)
    if str(path) == "" or p.name in ("", ".", ".."):
        raise UserError(f"{what} {str(path)!r}: not a file name")
    if p.is_dir():
        raise UserError(f"{what} {p}: is a directory")
    if p.exists() and not force:
        raise UserError(f"{what} {p} exists: pass --force to overwrite it")
    parent = p.parent
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if not parent.is_dir():
        raise UserError(f"{what} {p}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{what} {p}: cannot write in {parent}")
    return p


@contextmanager
def atomic_output(path, *, force: bool = True, what: str = "output"):
    """Yield a temporary file in ``path``'s folder (same suffix, so writers that pick a format
    by name keep working); on success it is renamed over ``path`` with the umask's mode, on
    any failure it is removed and ``path`` stays as it was."""
    p = check_output(path, force=force, what=what)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=p.suffix)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path, text: str, *, force: bool = True, what: str = "output") -> Path:
    with atomic_output(path, force=force, what=what) as tmp:
        tmp.write_text(text)
    return Path(path)


def write_bytes(path, data: bytes, *, force: bool = True, what: str = "output") -> Path:
    with atomic_output(path, force=force, what=what) as tmp:
        tmp.write_bytes(data)
    return Path(path)


@contextmanager
def atomic_directory(path, *, force: bool = False, what: str = "output folder"):
    """Yield a temporary folder beside ``path``; on success it replaces ``path`` (an existing
    one only with ``force``), on failure it is removed and ``path`` stays as it was."""
    p = Path(path)
    if str(path) == "" or p.name in ("", ".", ".."):
        raise UserError(f"{what} {str(path)!r}: not a folder name")
    if p.exists() and not p.is_dir():
        raise UserError(f"{what} {p} exists and is not a folder")
    if p.exists() and not force:
        raise UserError(f"{what} {p} exists: pass --force to replace it")
    check_output(p.parent / ".probe", what=what)      # the parent is (or can be) a writable folder
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=p.parent, prefix=f".{p.name}."))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~_umask())
        for f in tmp.rglob("*"):
            if f.is_file():
                os.chmod(f, 0o666 & ~_umask())
        if p.exists():
            old = Path(tempfile.mkdtemp(dir=p.parent, prefix=f".{p.name}.old."))
            os.replace(p, old / "x")
            os.replace(tmp, p)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, p)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
