"""Ranges of integer parameters: the one mechanism that says which values a size may take.

A hardware block declares a ``Range`` for each of its parameters next to its ``@block``
registration (``mcf.hw.registry``); the ``mcf`` command checks ``-p KEY=VALUE`` and its typed
options against them before anything is elaborated or allocated, so a bad value is one line
naming the field and what fits, never an assertion deep inside elaboration.

    Range(32, 1024, pow2=True).check("data_width", 48)
    SpecError: data_width=48: must be a power of two in [32, 1024] (fits: 32, 64, ..., 1024)
"""
from __future__ import annotations

from dataclasses import dataclass

from .bits import SpecError


def is_pow2(value: int) -> bool:
    return value >= 1 and not value & (value - 1)


def parse_int(text: str, what: str) -> int:
    """An integer written in decimal (``1_000`` allowed) or with a 0x / 0o / 0b prefix."""
    try:
        return int(str(text).strip(), 0)
    except ValueError:
        pass
    try:                                    # int(.., 0) refuses leading zeros ("08")
        return int(str(text).strip(), 10)
    except ValueError:
        raise SpecError(f"{what}={text!r}: not an integer") from None


@dataclass(frozen=True)
class Range:
    """Integers in ``[lo, hi]``; optionally powers of two or multiples of ``step``; ``zero``
    also admits 0 (a unit that is "off")."""
    lo: int
    hi: int
    pow2: bool = False
    step: int = 1
    zero: bool = False
    #: What the parameter means, for messages and ``--help``.
    doc: str = ""

    def __post_init__(self):
        if self.lo > self.hi or self.step < 1:
            raise ValueError(f"Range({self.lo}, {self.hi}, step={self.step}) is empty")

    def __contains__(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        if value == 0 and self.zero:
            return True
        if not self.lo <= value <= self.hi:
            return False
        return (not self.pow2 or is_pow2(value)) and value % self.step == 0

    def describe(self) -> str:
        kind = "a power of two" if self.pow2 else (f"a multiple of {self.step}" if self.step > 1
                                                    else "an integer")
        text = f"{kind} in [{self.lo}, {self.hi}]"
        return f"0 or {text}" if self.zero else text

    def fits(self, limit: int = 6) -> str:
        """A short list of the values that fit (for messages): ``32, 64, ..., 1024``."""
        values = []
        if self.zero:
            values.append(0)
        v = self.lo
        if self.pow2:
            v = 1 << max(0, (self.lo - 1).bit_length())
        elif v % self.step:
            v += self.step - v % self.step
        while v <= self.hi and len(values) < limit + 1:
            values.append(v)
            v = v * 2 if self.pow2 else v + self.step
        if len(values) > limit:
            last = 1 << (self.hi.bit_length() - 1) if self.pow2 else self.hi - self.hi % self.step
            return ", ".join(str(x) for x in values[:3]) + f", ..., {last}"
        return ", ".join(str(x) for x in values)

    def check(self, name: str, value) -> int:
        """``value`` (an int or the text of one) if it fits, else ``SpecError`` naming ``name``."""
        if isinstance(value, str):
            value = parse_int(value, name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"{name}={value!r}: must be {self.describe()}")
        if value not in self:
            raise SpecError(f"{name}={value}: must be {self.describe()} (fits: {self.fits()})")
        return value


def divisors(n: int, limit: int | None = None) -> list[int]:
    """The divisors of ``n`` in ascending order (up to ``limit``)."""
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    out = sorted(set(small + [n // d for d in small]))
    return [d for d in out if limit is None or d <= limit]


@dataclass(frozen=True)
class Choice:
    """One of a few named values (a mode, a preset): the text parameters' ``Range``."""
    values: tuple
    doc: str = ""

    def __contains__(self, value) -> bool:
        return value in self.values

    def describe(self) -> str:
        return "one of " + ", ".join(str(v) for v in self.values)

    def fits(self, limit: int = 6) -> str:
        return ", ".join(str(v) for v in self.values)

    def check(self, name: str, value) -> str:
        if value not in self.values:
            raise SpecError(f"{name}={value!r}: must be {self.describe()}")
        return value
