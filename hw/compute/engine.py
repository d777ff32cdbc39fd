"""The compute engine of one node as one block: matrix unit, vector unit, attention unit (with
its local replica directory) and KV block writer side by side, each with its own ports
(``matrix__*``, ``vector__*``, ``attention__*``, ``kv__*``).  The sequencing between them
(which the RTL decoder-layer run, ``mcf.sim.compute.layer``, does from Python today) is the
descriptor-driven controller still to be written; this block exists so that ``mcf synth
compute`` and the lint see the whole engine at a given array size.  The defaults are the
engine of the ``tiny`` model (head_dim 16, GQA group 2); the matrix array is the parameter
that scales (``-p rows=16 -p lanes=16``)."""
from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from mcf.hw.compute.attention import AttentionUnit
from mcf.hw.compute.kv_writer import KVWriter
from mcf.hw.compute.matrix import MatrixUnit
from mcf.hw.compute.vector import VectorUnit
from mcf.hw.registry import block


class ComputeEngine(wiring.Component):
    def __init__(self, rows=4, lanes=8, max_tokens=8, max_inputs=128, max_tiles=32,
                 head_dim=16, att_rows=4, max_keys=64, kv_lanes=4, vector_n=128, vec_lanes=8):
        self.units = {
            "matrix": MatrixUnit(rows, lanes, max_tokens, max_inputs, max_tiles),
            "vector": VectorUnit(vector_n, vec_lanes),
            "attention": AttentionUnit(head_dim, att_rows, max_keys),
            "kv": KVWriter(head_dim, kv_lanes),
        }
        super().__init__({name: Out(unit.signature) for name, unit in self.units.items()})

    def elaborate(self, platform):
        m = Module()
        for name, unit in self.units.items():
            m.submodules[name] = unit
            wiring.connect(m, wiring.flipped(getattr(self, name)), unit)
        return m


@block("compute", "compute engine: matrix (rows x lanes MACs), vector, attention + directory, KV writer",
       variants=({"rows": 16, "lanes": 16},), rows=4, lanes=8, max_tokens=8, max_inputs=128,
       max_tiles=32, head_dim=16, att_rows=4, max_keys=64, kv_lanes=4, vector_n=128, vec_lanes=8)
def _engine(rows, lanes, max_tokens, max_inputs, max_tiles, head_dim, att_rows, max_keys, kv_lanes, vector_n,
            vec_lanes):
    return ComputeEngine(rows, lanes, max_tokens, max_inputs, max_tiles, head_dim, att_rows, max_keys,
                         kv_lanes, vector_n, vec_lanes)
