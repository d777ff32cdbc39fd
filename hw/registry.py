"""Every synthesizable block of ``mcf.hw``, by name, with its default parameters.

``mcf verilog``, ``mcf synth``, the lint test and ``make demo`` walk this registry.  A block
module registers itself with ``@block(...)``; ``blocks()`` imports every module of
``mcf.hw`` so that a new block needs no edit here.

Each block declares the range of every parameter beside its registration
(``ranges={"lanes": Range(1, 64, pow2=True)}``; a parameter that is a ``NodeConfig`` field
takes the field's range, ``mcf.spec.node.RANGES``, unless the block narrows it).  ``check``
holds ``-p KEY=VALUE`` against them before anything is elaborated, so a bad value is one line
naming the parameter and the values that fit, never an assertion or an hour of elaboration.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from amaranth.back import verilog

from mcf.spec.bits import SpecError
from mcf.spec.node import RANGES as NODE_RANGES
from mcf.spec.params import Range

#: Ranges several blocks share.
ADDR_WIDTH = Range(12, 64, doc="AXI4 address bits")
OUTSTANDING = Range(1, 64, doc="AXI4 bursts in flight")
FLAG = Range(0, 1, doc="0 or 1")


@dataclass(frozen=True)
class BlockInfo:
    name: str
    doc: str
    factory: Callable[..., Any]
    params: dict = field(default_factory=dict)
    #: Other parameter sets worth linting/synthesizing (e.g. the 128-bit variant).
    variants: tuple = ()
    #: The range of each parameter (declared with the block, else the NodeConfig field's).
    ranges: dict = field(default_factory=dict)
    #: Whether the registry lint (tests/hw/test_registry.py) checks the default parameters
    #: too; off for a top whose default only repeats another block's lint at a larger size.
    lint_default: bool = True
    #: Instances below the top (``exec.attn.unit``) that ``mcf synth --method blocks`` maps one
    #: by one (each with the parts below it as black boxes), the rest of the top being one more
    #: run: for a top too large for one Yosys run on this machine.
    parts: tuple = ()
    #: Whether the design of the default parameters is simulated in Icarus (a cocotb bench):
    #: False for a top too large for Icarus, which only Verilator runs (the Qwen node).  The
    #: registry lint's iverilog check guards Icarus benches only, so it skips such a default
    #: (Verilator's lint still runs); the variants are always checked.
    icarus_default: bool = True

    def range_of(self, name: str) -> Range | None:
        return self.ranges.get(name) or NODE_RANGES.get(name)

    def check(self, overrides: dict) -> dict:
        """The full parameter set with ``overrides`` (ints, or their text) checked against the
        declared ranges; ``SpecError`` for an unknown name or a value out of range."""
        unknown = set(overrides) - set(self.params)
        if unknown:
            raise SpecError(f"block {self.name}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                            f"known: {', '.join(self.params) or 'none'}")
        out = dict(self.params)
        for key, value in overrides.items():
            r = self.range_of(key)
            if r is None:
                raise SpecError(f"block {self.name}: parameter {key} declares no range")
            out[key] = r.check(key, value)
        return out

    def build(self, **overrides):
        return self.factory(**self.check(overrides))

    def verilog(self, **overrides) -> str:
        from mcf.hw.primitives import with_models
        return with_models(verilog.convert(self.build(**overrides), name=self.name))


_BLOCKS: dict[str, BlockInfo] = {}


def block(name: str, doc: str, variants: tuple = (), ranges: dict | None = None, lint_default: bool = True,
          parts: tuple = (), icarus_default: bool = True, **params):
    """Decorator registering a component factory under ``name`` with its default ``params``
    and the ``ranges`` they may take (``lint_default``, ``parts``, ``icarus_default``: see
    ``BlockInfo``)."""
    def register(factory):
        if name in _BLOCKS and _BLOCKS[name].factory is not factory:
            raise RuntimeError(f"block {name} registered twice")
        _BLOCKS[name] = BlockInfo(name, doc, factory, params, variants, dict(ranges or {}), lint_default,
                                  tuple(parts), icarus_default)
        return factory
    return register


def blocks() -> dict[str, BlockInfo]:
    import mcf.hw as hw
    for info in pkgutil.walk_packages(hw.__path__, prefix="mcf.hw."):
        importlib.import_module(info.name)
    return dict(sorted(_BLOCKS.items()))


def get(name: str) -> BlockInfo:
    known = blocks()
    if name not in known:
        raise ValueError(f"unknown block {name!r}; known blocks: {', '.join(known)}")
    return known[name]


def parse_params(pairs: list[str], info: BlockInfo | None = None) -> dict:
    """``["data_width=128", ...]`` -> ``{"data_width": 128}``; with ``info``, every value is
    checked against the block's declared ranges (``SpecError`` naming what fits)."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"parameter {pair!r} is not KEY=VALUE")
        if key in out:
            raise SpecError(f"parameter {key} given twice")
        out[key] = value.strip()
    if info is not None:
        checked = info.check(out)
        return {k: checked[k] for k in out}
    from mcf.spec.params import parse_int
    return {k: parse_int(v, k) for k, v in out.items()}
