"""A stand-in for the execute unit while it is being built (TEMPORARY: the node with it runs
no EX instruction; SEQ_CAPS.exec reads 0).

It has the execute unit's ports (docs/node.md, node-common interface 1): ``instr`` (ready
while idle), ``done``, ``fault`` + ``fault_cause``, one AXI4 master ``m_axi`` (never used),
``dir_wr`` / ``dir_rd`` (a small replica directory, so control packets and DIR_DATA work)
and ``perf`` (no events).  Every instruction it takes faults ILLEGAL_INSTRUCTION.
"""
from __future__ import annotations

from amaranth import Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from mcf.hw.axi.full import AXI4Signature
from mcf.hw.compute.directory import ReplicaDirectory
from mcf.hw.seq.regs import DirReadSignature
from mcf.hw.seq.rx import DirWriteSignature
from mcf.hw.seq.sequencer import FAULT_BITS
from mcf.spec.isa import INSTR_BITS, SeqFault
from mcf.spec.node import NodeConfig
from mcf.spec.plan import ReplicaState

#: Performance events an execute unit reports (fields named after ``spec.isa.PerfCounter``).
ExecPerfLayout = data.StructLayout({name: 1 for name in (
    "busy_gemm", "busy_vec", "busy_attn", "busy_kvw", "busy_embed", "busy_ldst", "mac_beats", "stall_ex_ddr")})


class ExecPlaceholder(wiring.Component):
    #: Directory ids this stand-in stores (writes beyond are ignored, reads answer INVALID).
    DIR_BITS = 8

    def __init__(self, config: NodeConfig = NodeConfig()):
        self.config = config
        super().__init__({
            "instr": In(stream.Signature(INSTR_BITS)),
            "done": Out(1),
            "fault": Out(1),
            "fault_cause": Out(FAULT_BITS),
            "m_axi": Out(AXI4Signature(config.ddr_addr_bits, config.data_width, 1)),
            "dir_wr": In(DirWriteSignature()),
            "dir_rd": In(DirReadSignature()),
            "perf": Out(ExecPerfLayout),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.directory = d = ReplicaDirectory(self.DIR_BITS)
        high = lambda block: block[self.DIR_BITS:].any()  # noqa: E731
        m.d.comb += [
            d.wr_en.eq(self.dir_wr.en & ~high(self.dir_wr.block)), d.wr_block.eq(self.dir_wr.block),
            d.wr_state.eq(self.dir_wr.state),
            d.lookup_en.eq(self.dir_rd.en), d.lookup_block.eq(self.dir_rd.block),
            self.instr.ready.eq(1),
        ]
        was_high = Signal()
        m.d.sync += was_high.eq(high(self.dir_rd.block))
        m.d.comb += self.dir_rd.state.eq(Mux(was_high, int(ReplicaState.INVALID), d.state))
        m.d.sync += [self.fault.eq(self.instr.valid), self.fault_cause.eq(SeqFault.ILLEGAL_INSTRUCTION)]
        return m
