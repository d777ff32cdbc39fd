"""hw/node.py's ``SeqRegisters`` (the sequencer's register window) in the Amaranth simulator:
every register of the window read back over its ``RegisterBusSignature`` port -- RW words as
written (their masks), RO words composed from random status inputs (``Register.encode``),
SEQ_CONTROL (W1P) as 0, PERF_HI the high half taken at the PERF_LO read; writes with random
byte strobes (round 29: an enable a byte, ``write_bytes``).  (Round 29: the read
word is chosen by the address's bits within the window, ``pick``; the answer the cycle after.)"""
import random

from mcf.hw.node import SeqRegisters, seq_registers
from mcf.sim.amaranth_util import simulate
from mcf.spec import REGISTERS, Access
from mcf.spec.node import NodeConfig


def test_every_window_register_reads_back():
    dut = SeqRegisters(NodeConfig.qwen2_5_1_5b())
    regs = seq_registers()
    rng = random.Random(29)
    ins = {"running": 1, "done": 1, "fault": 1, "idle": 1, "start_pending": 1, "fault_cause": len(dut.fault_cause),
           "pc": len(dut.pc), "fault_pc": len(dut.fault_pc), "wait": 32, "levels": 32, "sem_value": 16,
           "perf_value": len(dut.perf_value)}
    checked, stored = [], {}

    async def bench(ctx):
        async def read(r):
            ctx.set(dut.bus.r_addr, r.offset >> 2)
            ctx.set(dut.bus.r_en, 1)
            await ctx.tick()
            ctx.set(dut.bus.r_en, 0)
            assert ctx.get(dut.bus.r_valid)
            return ctx.get(dut.bus.r_data)

        for rnd in range(6):
            for r in regs:
                if r.access is Access.RW:
                    for _ in range(2):          # (the second write's bytes at random: strobes)
                        v, strb = rng.getrandbits(32), rng.choice([0xF, rng.getrandbits(4)])
                        bm = sum(0xFF << 8 * i for i in range(4) if strb >> i & 1)
                        ctx.set(dut.bus.w_addr, r.offset >> 2)
                        ctx.set(dut.bus.w_data, v)
                        ctx.set(dut.bus.w_strb, strb)
                        ctx.set(dut.bus.w_en, 1)
                        await ctx.tick()
                        ctx.set(dut.bus.w_en, 0)
                        stored[r.name] = (stored.get(r.name, r.reset) & ~bm | v & bm) & r.mask
            val = {k: rng.getrandbits(b) for k, b in ins.items()}
            state = rng.getrandbits(len(dut.dir_rd.state))
            for k, v in val.items():
                ctx.set(getattr(dut, k), v)
            ctx.set(dut.dir_rd.state, state)
            want = {
                "SEQ_CAPS": dut.caps,
                "SEQ_STATUS": REGISTERS["SEQ_STATUS"].encode(
                    running=val["running"], done=val["done"], fault=val["fault"], idle=val["idle"],
                    start_pending=val["start_pending"], fault_cause=val["fault_cause"]),
                "SEQ_PC": REGISTERS["SEQ_PC"].encode(pc=val["pc"]),
                "SEQ_FAULT_PC": REGISTERS["SEQ_FAULT_PC"].encode(pc=val["fault_pc"]),
                "SEQ_WAIT": val["wait"], "SEQ_LEVELS": val["levels"],
                "SEM_DATA": REGISTERS["SEM_DATA"].encode(value=val["sem_value"]),
                "DIR_DATA": REGISTERS["DIR_DATA"].encode(state=state),
                "PERF_LO": val["perf_value"] & 0xFFFFFFFF,
                **stored,
            }
            order = list(regs)
            rng.shuffle(order)
            order = [r for r in order if r.name != "PERF_HI"] + [REGISTERS["PERF_LO"], REGISTERS["PERF_HI"]]
            for r in order:
                got = await read(r)
                if r.name == "PERF_HI":
                    assert got == val["perf_value"] >> 32, r.name
                elif r.access is Access.RO or r.name in stored:
                    assert got == want[r.name], (rnd, r.name, hex(got), hex(want[r.name]))
                else:
                    assert got == 0, r.name           # (SEQ_CONTROL: W1P)
                checked.append(r.name)
    simulate(dut, bench)
    assert {r.name for r in regs} <= set(checked)
