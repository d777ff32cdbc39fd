"""Bit-level layouts: the one mechanism behind every header, descriptor and register.

A ``BitLayout`` is an ordered list of ``Field``s packed LSB-first into an integer of
``total_bits``.  The same object drives the Python encoder/decoder (``pack``/``unpack``),
the Amaranth ``StructLayout`` built in ``mcf.hw`` and the generated reference page, so a
field is never defined twice.
"""
from __future__ import annotations

import dataclasses
import enum
import zlib
from dataclasses import dataclass
from typing import Mapping


class SpecError(ValueError):
    """A value does not fit the wire format (out of range, unknown enum, malformed)."""


@dataclass(frozen=True)
class Field:
    name: str
    width: int
    doc: str
    enum: type[enum.IntEnum] | None = None
    #: A field with a constant value is filled by the encoder and checked by the decoder.
    const: int | None = None
    #: Reserved fields must be zero on the wire.
    reserved: bool = False
    #: Two's-complement field: values in [-2^(w-1), 2^(w-1) - 1]; ``pack`` stores the low
    #: ``width`` bits, ``unpack`` sign-extends.
    signed: bool = False

    def check(self, value: int, what: str = "") -> int:
        where = f"{what}.{self.name}" if what else self.name
        if self.enum is not None:
            try:
                return int(self.enum(value))
            except ValueError:
                names = ", ".join(f"{m.name}={m.value}" for m in self.enum)
                raise SpecError(f"{where}={value!r} is not a valid {self.enum.__name__} "
                                f"(one of {names})") from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{where} must be an integer, got {type(value).__name__}")
        if self.signed:
            lo, hi = -(1 << (self.width - 1)), (1 << (self.width - 1)) - 1
            if not lo <= value <= hi:
                raise SpecError(f"{where}={value} out of range [{lo}, {hi}] ({self.width}-bit signed)")
            return value
        if not 0 <= value < (1 << self.width):
            raise SpecError(f"{where}={value} out of range [0, {(1 << self.width) - 1}] "
                            f"({self.width} bits)")
        return value

    @property
    def max(self) -> int:
        return (1 << self.width) - 1


class BitLayout:
    """An ordered set of fields packed little-endian, first field at bit 0."""

    def __init__(self, name: str, fields: list[Field], total_bits: int | None = None,
                 doc: str = ""):
        self.name = name
        self.doc = doc
        self.fields = list(fields)
        self.offsets: dict[str, int] = {}
        pos = 0
        for f in self.fields:
            if f.name in self.offsets:
                raise SpecError(f"{name}: duplicate field {f.name}")
            if f.width <= 0:
                raise SpecError(f"{name}.{f.name}: width must be positive")
            self.offsets[f.name] = pos
            pos += f.width
        if total_bits is None:
            total_bits = pos
        if pos > total_bits:
            raise SpecError(f"{name}: fields take {pos} bits, more than {total_bits}")
        if pos < total_bits:
            raise SpecError(f"{name}: fields take {pos} of {total_bits} bits; "
                            "declare the rest as a reserved field")
        self.total_bits = total_bits
        self.by_name = {f.name: f for f in self.fields}

    @property
    def total_bytes(self) -> int:
        return (self.total_bits + 7) // 8

    def __getitem__(self, name: str) -> Field:
        return self.by_name[name]

    def pack(self, values: Mapping[str, int]) -> int:
        word = 0
        unknown = set(values) - set(self.by_name)
        if unknown:
            raise SpecError(f"{self.name}: unknown field(s) {', '.join(sorted(unknown))}")
        for f in self.fields:
            if f.const is not None:
                v = values.get(f.name, f.const)
                if v != f.const:
                    raise SpecError(f"{self.name}.{f.name} must be {f.const:#x}")
            elif f.reserved:
                v = values.get(f.name, 0)
                if v != 0:
                    raise SpecError(f"{self.name}.{f.name} is reserved and must be 0")
            else:
                if f.name not in values:
                    raise SpecError(f"{self.name}: missing field {f.name}")
                v = f.check(values[f.name], self.name) & f.max
            word |= v << self.offsets[f.name]
        return word

    def unpack(self, word: int, check: bool = True) -> dict[str, int]:
        if not 0 <= word < (1 << self.total_bits):
            raise SpecError(f"{self.name}: word does not fit in {self.total_bits} bits")
        out = {}
        for f in self.fields:
            v = (word >> self.offsets[f.name]) & f.max
            if f.signed and v >> (f.width - 1):
                v -= 1 << f.width
            if check:
                if f.const is not None and v != f.const:
                    raise SpecError(f"malformed {self.name}: {f.name}={v:#x}, expected {f.const:#x}")
                if f.reserved and v != 0:
                    raise SpecError(f"malformed {self.name}: reserved field {f.name}={v:#x} is not 0")
                if f.enum is not None:
                    try:
                        f.enum(v)
                    except ValueError:
                        raise SpecError(f"malformed {self.name}: {f.name}={v} is not a valid "
                                        f"{f.enum.__name__}") from None
            out[f.name] = v
        return out


class _NotSpec(Exception):
    """An object the fingerprint does not describe (functions, classes other than enums, tables)."""


def canonical(obj):
    """``obj`` as nested tuples of str / int / bool / None: what hardware and software must agree
    on (names, widths, offsets, encodings, constants), without docs or reset values."""
    if isinstance(obj, enum.Enum):
        return (type(obj).__name__, obj.name, canonical(obj.value))
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        return ("enum", obj.__name__, tuple((m.name, canonical(m.value)) for m in obj))
    if isinstance(obj, Field):
        return ("field", obj.name, obj.width, obj.signed, obj.const, obj.reserved,
                obj.enum.__name__ if obj.enum is not None else None)
    if isinstance(obj, BitLayout):
        return ("layout", obj.name, obj.total_bits, tuple(canonical(f) for f in obj.fields))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return (type(obj).__name__,) + tuple((f.name, canonical(getattr(obj, f.name)))
                                             for f in dataclasses.fields(obj) if f.name not in ("doc", "reset"))
    if isinstance(obj, (tuple, list, frozenset, set)):
        items = tuple(canonical(x) for x in obj)
        return tuple(sorted(items, key=repr)) if isinstance(obj, (set, frozenset)) else items
    if isinstance(obj, dict):
        return tuple(sorted(((canonical(k), canonical(v)) for k, v in obj.items()), key=repr))
    raise _NotSpec(type(obj).__name__)


def fingerprint(*namespaces: Mapping) -> int:
    """CRC-32 of the public constants, enums, layouts and registers of ``namespaces`` (module
    dicts), names sorted: it changes when an encoding changes and not when a doc does.  Derived
    tables (NumPy arrays) are left out: they follow from the constants, and their floating-point
    construction could differ in an ulp between the build machine and the board's A53."""
    entries = []
    for ns in namespaces:
        for name in sorted(ns):
            # (not an identifier: names a tool put there, e.g. pytest's assertion rewriting's @py_assert)
            if name.startswith("_") or not name.isidentifier() or name == "SPEC_VERSION":
                continue
            try:
                entries.append((name, canonical(ns[name])))
            except _NotSpec:
                continue
    return zlib.crc32(repr(tuple(entries)).encode())
