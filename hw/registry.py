"""Every synthesizable block of ``mcf.hw``, by name, with its default parameters.

``mcf verilog``, ``mcf synth``, the lint test and ``make demo`` walk this registry.  A block
module registers itself with ``@block(...)``; ``blocks()`` imports every module of
``mcf.hw`` so that a new block needs no edit here.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

from amaranth.back import verilog


@dataclass(frozen=True)
class BlockInfo:
    name: str
    doc: str
    factory: Callable[..., Any]
    params: dict = field(default_factory=dict)
    #: Other parameter sets worth linting/synthesizing (e.g. the 128-bit variant).
    variants: tuple = ()

    def build(self, **overrides):
        unknown = set(overrides) - set(self.params)
        if unknown:
            raise ValueError(f"block {self.name}: unknown parameter(s) {', '.join(sorted(unknown))}; "
                             f"known: {', '.join(self.params) or 'none'}")
        return self.factory(**{**self.params, **overrides})

    def verilog(self, **overrides) -> str:
        return verilog.convert(self.build(**overrides), name=self.name)


_BLOCKS: dict[str, BlockInfo] = {}


def block(name: str, doc: str, variants: tuple = (), **params):
    """Decorator registering a component factory under ``name``."""
    def register(factory):
        if name in _BLOCKS and _BLOCKS[name].factory is not factory:
            raise RuntimeError(f"block {name} registered twice")
        _BLOCKS[name] = BlockInfo(name, doc, factory, params, variants)
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


def parse_params(pairs: list[str]) -> dict:
    """``["data_width=128", ...]`` -> ``{"data_width": 128}`` (ints where they parse)."""
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"parameter {pair!r} is not KEY=VALUE")
        try:
            out[key] = int(value, 0)
        except ValueError:
            out[key] = value
    return out
