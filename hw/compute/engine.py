"""The compute units of one node as one block: matrix unit, vector unit, attention unit and KV
block writer side by side, each with its own ports (``matrix__*``, ``vector__*``,
``attention__*``, ``kv__*``), so that ``mcf synth compute`` and the lint see the units alone at a
given array size.  The node runs them inside the execute unit (``mcf.hw.compute.exec``: SPAD,
movers, one instruction at a time).  The sizes come from a
``mcf.spec.node.NodeConfig`` (MAC array, tokens per pass, lanes, attention rows and keys,
head_dim); the registry builds the engine of ``NodeConfig.tiny()`` (head_dim 16, GQA group 2),
and the matrix array is the parameter that scales (``-p mac_rows=16 -p mac_lanes=16``)."""
from __future__ import annotations

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from mcf.hw.compute.attention import AttentionUnit, out_words
from mcf.hw.compute.kv_writer import KVWriter
from mcf.hw.compute.matrix import MatrixUnit
from mcf.hw.compute.vector import VectorUnit
from mcf.hw.registry import block
from mcf.spec.node import NodeConfig
from mcf.spec.params import Range


class ComputeEngine(wiring.Component):
    """The units of ``config``'s engine; ``max_inputs`` / ``max_tiles`` / ``vector_n`` (GEMM
    input width, output tiles, vector row length) default to what the config's model shapes
    need."""

    def __init__(self, config: NodeConfig = NodeConfig.tiny(), max_inputs: int | None = None,
                 max_tiles: int | None = None, vector_n: int | None = None):
        c = config
        widest = max(c.hidden_size, c.intermediate_size, c.num_heads * c.head_dim)
        max_inputs = widest if max_inputs is None else max_inputs
        max_tiles = -(-widest // c.mac_rows) if max_tiles is None else max_tiles
        vector_n = widest if vector_n is None else vector_n
        self.config = config
        self.units = {
            "matrix": MatrixUnit(c.mac_rows, c.mac_lanes, c.max_tokens, max_inputs, max_tiles),
            "vector": VectorUnit(vector_n, c.vec_lanes),
            "attention": AttentionUnit(c.head_dim, c.att_rows, c.max_keys, lanes=c.att_lanes or None,
                                       words=out_words(c.head_dim, c.vec_lanes)),
            "kv": KVWriter(c.head_dim, c.kv_lanes),
        }
        super().__init__({name: Out(unit.signature) for name, unit in self.units.items()})

    def elaborate(self, platform):
        m = Module()
        for name, unit in self.units.items():
            m.submodules[name] = unit
            wiring.connect(m, wiring.flipped(getattr(self, name)), unit)
        return m


@block("compute", "compute engine: matrix (mac_rows x mac_lanes MACs), vector, attention + directory, KV writer",
       variants=({"mac_rows": 16, "mac_lanes": 16},),
       **NodeConfig.tiny().fields_of("mac_rows", "mac_lanes", "max_tokens", "head_dim", "att_rows", "max_keys",
                                     "kv_lanes", "vec_lanes"),
       max_inputs=128, max_tiles=32, vector_n=128,
       ranges={"head_dim": Range(1, 256), "max_inputs": Range(1, 1 << 16), "max_tiles": Range(1, 1 << 16), "vector_n": Range(1, 1 << 16)})
def _engine(max_inputs, max_tiles, vector_n, **fields):
    return ComputeEngine(NodeConfig.tiny(**fields), max_inputs, max_tiles, vector_n)
