"""The cluster top: N ``Node``s (``mcf.hw.node``) and the switch model they meet at, in one
Verilog file, so the simulator (Verilator) steps every link beat; Python only plays each node's
PS and DDR.

    PS k ──AXI-Lite── s_axil[k] ─► Node k ─ m_axi[k] ──AXI4── DDR k (cocotbext-axi AxiRam)
                                     │ tx[0] ▲ rx[0]
                                     ▼       │
                                    switch port k          (Switch: sim/rtlcluster/switch.py)

Every port of a node except its network ports is a port of the top with a leading node index:
``s_axil__<k>__…``, ``m_axi__<k>__…`` (``m_axi__<k>__<p>__…`` when the node has several HP
ports), ``irq__<k>``.  The node's signature decides, so the top follows the node as it grows.
The switch's table write port, fault inputs and counters are ports named ``switch_<name>``.

The node is converted to Verilog once (module ``mcf_node``) and instantiated N times
(``verilog()`` writes both modules into one file), and Verilator builds it once as a
hierarchical block (``hier_blocks``; without it Verilator 5 writes each instance's code again):
the Verilog, Verilator's C++ and its compile stay the size of one node whatever N.
"""
from __future__ import annotations

import json

from amaranth import ClockSignal, Instance, Module, ResetSignal
from amaranth.back import verilog as amaranth_verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In

from mcf.hw.node import Node
from mcf.spec.node import NodeConfig

from .switch import Switch, SwitchTiming

#: The node's ports that the switch takes.
NETWORK = ("rx", "tx")
#: The Verilog module name of one node.
NODE_MODULE = "mcf_node"


def _elements(obj, dims):
    """The elements of a (possibly multi-dimensional) member, flattened."""
    if not dims:
        return [obj]
    return [e for sub in obj for e in _elements(sub, dims[1:])]


def _join(m, outer, inner, member):
    """Connect a top-level member (``outer``) to the same member of a node or the switch."""
    for mine, theirs in zip(_elements(outer, member.dimensions), _elements(inner, member.dimensions)):
        if member.is_port:
            m.d.comb += theirs.eq(mine) if member.flow == In else mine.eq(theirs)
        else:
            wiring.connect(m, wiring.flipped(mine), theirs)


def _name(factory) -> str:
    """A node class or factory (``functools.partial``) by name, for the Verilog cache key."""
    if hasattr(factory, "func"):
        kw = ",".join(f"{k}={_name(v)}" for k, v in sorted(factory.keywords.items()))
        return f"{_name(factory.func)}({kw})"
    return f"{getattr(factory, '__module__', '')}.{getattr(factory, '__qualname__', repr(factory))}"


class ClusterTop(wiring.Component):
    """``nodes`` nodes of ``config`` (one network port each) on one switch of ``timing``."""

    #: Verilator builds these modules once, as hierarchical blocks (``mcf.sim.runner``).
    hier_blocks = (NODE_MODULE,)

    def __init__(self, nodes: int, config: NodeConfig = NodeConfig.tiny(),
                 timing: SwitchTiming = SwitchTiming(), node_class=Node):
        if not 1 <= nodes <= 16:
            raise ValueError(f"nodes={nodes}: the RTL cluster has 1..16 nodes")
        self.n, self.timing = nodes, timing
        self.config = config.replace(net_ports=1)
        self.node_class = node_class
        self.node = node_class(self.config)          # converted once, instantiated N times
        self.switch = Switch.for_config(nodes, self.config, timing)
        members, self._node_members = {}, {}
        for name, member in self.node.signature.members.items():
            if name in NETWORK:
                continue
            members[name] = member.array(nodes)
            self._node_members[name] = member
        for name, member in self.switch.signature.members.items():
            if name not in ("i", "o"):
                members[f"switch_{name}"] = member
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.switch = sw = self.switch
        signature = self.node.signature
        for k in range(self.n):
            shadow = signature.create(path=(f"node{k}",))
            ports = {}
            for path, member, value in signature.flatten(shadow):
                ports[("i_" if member.flow == In else "o_") + "__".join(map(str, path))] = value
            m.submodules[f"node{k}"] = Instance(NODE_MODULE, i_clk=ClockSignal(), i_rst=ResetSignal(), **ports)
            for name, member in self._node_members.items():
                _join(m, getattr(self, name)[k], getattr(shadow, name), member)
            wiring.connect(m, shadow.tx[0], sw.i[k])
            wiring.connect(m, sw.o[k], shadow.rx[0])
        for name, member in sw.signature.members.items():
            if name not in ("i", "o"):
                _join(m, getattr(self, f"switch_{name}"), getattr(sw, name), member)
        return m

    def verilog_key(self) -> str:
        """What the Verilog depends on: the sizes, the switch, the node class, the sources."""
        from mcf.sim.runner import source_digest
        return json.dumps({"nodes": self.n, "config": self.config.as_dict(), "timing": self.timing.as_dict(),
                           "node": _name(self.node_class),
                           "sources": source_digest("hw", "spec", "sim/rtlcluster")}, sort_keys=True)

    def verilog(self, toplevel: str = "dut") -> str:
        """The whole cluster: the node module, then the top (switch + N node instances)."""
        return (amaranth_verilog.convert(self.node, name=NODE_MODULE) + "\n"
                + amaranth_verilog.convert(self, name=toplevel))
