"""ATTN_SM (the softmax pass over score rows in SPAD, hw/compute/exec/movers.py ``AttnMover``) and
ATTN_Q O on the execute unit of the tiny node with VL = 4 and a 16 x 8 array, cocotb + Icarus,
AxiRam as DDR with random pauses: query rows at 2-D strides in SPAD, a K and a V segment in DDR
(``spec/kv.py``); GEMM_QK writes the score rows; ATTN_Q QUERY; ATTN_SM MAX over two runs of
keys (the second from its own score words, key position and V scale word), ATTN_EMIT MAX ==
golden ``partial_state`` m; ATTN_SM APPLY over the same runs: the w rows == golden
``attn_weights`` and (ATTN_EMIT STATE, o untouched = 0) l == golden ``state_sums``' l; then o
words (what GEMM_PV writes: sat32 of golden ``state_sums``' o, rows 2 RB beats apart) loaded by ATTN_Q O and
ATTN_EMIT FINAL == golden ``finalize``.  Bit for bit.  Then APPLY again over all the keys with V stored as a
run of blocks (``block_keys`` 10: a block's scale words not whole bus beats, a frame per block; 20:
whole beats, one frame; the last block partial, gaps between the segments): the same w rows.
``run_softmax`` runs on the same build as GEMM_QK's
``run_scores`` (tests/hw/compute/exec/test_scores.py ``test_scores_cocotb``: one build of the unit).  The same program on the golden node simulator
(``NodeSim``) gives the same SPAD words.  Fields ATTN_SM refuses: ILLEGAL_INSTRUCTION."""
import cocotb
import numpy as np
import pytest

from mcf.sim.compute.cost import softmax_pass_cycles
from mcf.hw.compute.exec.movers import Geometry
from mcf.spec import isa
from mcf.spec.isa import AttnLoad, AttnPass, EmitMode, SeqFault
from mcf.spec.kv import pack_segment
from mcf.spec.node import NodeConfig
from mcf.sw.golden import fixed as fx
from tests.hw.compute.exec.test_movers import Spad, bfp_rows, i32

CFG = NodeConfig.tiny(mac_rows=16, vec_lanes=4)
VL, P, D = CFG.vec_lanes, CFG.mac_rows, CFG.head_dim
KSEG, VSEG = 0x20000, 0x30000
TOKENS, HEADS, KEYS, CUT = 2, 2, 48, 32          # R = 4 rows (the unit's), keys in runs [0, 32), [32, 48)
QPOS0, KPOS0 = 30, 0                              # token t at 30 + t sees keys 0 .. 30 + t
RB = D // VL
Q_AT, SC_AT, W_AT, O_AT, OUT_AT, W2_AT = 0, 64, 160, 256, 300, 400     # SPAD beats


def golden(rng):
    """Inputs and the golden values of the whole sequence (row r = t HEADS + h)."""
    R = TOKENS * HEADS
    qm, qe = fx.prescale_query(bfp_rows(rng, R, D), D)
    kq, ka, ke = fx.quantize_kv(bfp_rows(rng, KEYS, D))
    vq, va, ve = fx.quantize_kv(bfp_rows(rng, KEYS, D))
    va[5] = 0                                                     # an all-zero V key
    q3 = (qm.reshape(TOKENS, HEADS, D), qe.reshape(TOKENS, HEADS))
    s = fx.scores(q3, kq[:, None], ka[:, None], ke[:, None], HEADS)            # [HEADS, TOKENS, KEYS]
    valid = np.broadcast_to(fx.causal_mask(QPOS0 + np.arange(TOKENS), KPOS0 + np.arange(KEYS))[None], s.shape)
    st = fx.partial_state(s, valid, vq[:, None], va[:, None], ve[:, None], HEADS)
    _, w = fx.attn_weights(s, valid, va[:, None], ve[:, None], HEADS, st.m)
    l, o = fx.state_sums(s, valid, vq[:, None], va[:, None], ve[:, None], HEADS, st.m)

    def rows(a):                                                  # [HEADS, TOKENS, ...] -> [R, ...]
        return np.asarray(a).swapaxes(0, 1).reshape(R, *np.asarray(a).shape[2:])
    return dict(qm=qm, qe=qe, k=(kq, ka, ke), v=(vq, va, ve), s=rows(s), m=rows(st.m), w=rows(w),
                l=rows(fx.sat(l, 32)), o=rows(fx.sat(o, 32)),
                final=fx.finalize(st).reshape(R, D))              # finalize: [T, Hq, d]


def program(base=0):
    """The instructions after the score GEMM, in order (``base``: the DDR's first address)."""
    R = TOKENS * HEADS
    sm = dict(scores=SC_AT, s_stride=KEYS // VL, keys=CUT, kpos0=KPOS0, seg=base + VSEG, w=W_AT, w_stride=KEYS // VL,
              tokens=TOKENS, heads=HEADS)
    run2 = dict(scores=SC_AT + CUT // VL, keys=KEYS - CUT, kpos0=KPOS0 + CUT, seg=base + VSEG + 2 * CUT, w=W_AT + CUT // VL)
    rows = dict(tokens=TOKENS, heads=HEADS, tok_stride=HEADS * RB, head_stride=RB)
    return [
        isa.AttnQ(what=AttnLoad.QUERY, spad=Q_AT, qpos0=QPOS0, **rows),
        isa.AttnSm(phase=AttnPass.MAX, first=1, **sm),
        isa.AttnSm(phase=AttnPass.MAX, first=0, **{**sm, **run2}),
        isa.AttnEmit(mode=EmitMode.MAX, spad=OUT_AT, **rows),
        isa.AttnSm(phase=AttnPass.APPLY, first=1, **sm),
        isa.AttnSm(phase=AttnPass.APPLY, first=0, **{**sm, **run2}),
        isa.AttnEmit(mode=EmitMode.STATE, spad=OUT_AT + 4, **rows),
        isa.AttnQ(what=AttnLoad.O, spad=O_AT, qpos0=0, tokens=TOKENS, heads=HEADS, tok_stride=HEADS * 2 * RB,
                  head_stride=2 * RB),
        isa.AttnEmit(mode=EmitMode.FINAL, spad=OUT_AT + 4 + R * (D + 2) // VL, **rows),
    ]


def rows_program(base=0):
    """ATTN_Q ROWS (the array path's load: rows, positions, emptied states, no query data) after a
    QUERY at other positions: EMIT MAX (every m emptied), a deferred MAX over GEMM_QK's scores (the
    query from SPAD, the positions ROWS wrote: m == golden), EMIT MAX; ``[1]`` is the ROWS."""
    rows = dict(tokens=TOKENS, heads=HEADS, tok_stride=HEADS * RB, head_stride=RB)
    return [isa.AttnQ(what=AttnLoad.QUERY, spad=Q_AT, qpos0=0, **rows),
            isa.AttnQ(what=AttnLoad.ROWS, spad=CFG.spad_beats - 1, qpos0=QPOS0, **rows),
            isa.AttnEmit(mode=EmitMode.MAX, spad=W2_AT, **rows),
            program(base)[1].replace(keys=KEYS, defer=1), score_gemm(base),
            isa.AttnEmit(mode=EmitMode.MAX, spad=W2_AT + 1, **rows)]


def rows_refused(base=0):
    """ATTN_KV after ROWS (no query data): ILLEGAL_INSTRUCTION."""
    return isa.AttnKV(phase=AttnPass.MAX, seg=base + KSEG, v_off=0, seg_stride=0, blocks=1, keys=KEYS, kpos0=0,
                      pos_stride=0, block0=0, block_stride=0, gated=0, first=1)


def o_rows(g):
    """SPAD words from O_AT: each o row followed by its bitwise complement (the o rows 2 RB beats
    apart, as GEMM_PV's wide rows lie; ATTN_Q O reads them at that stride)."""
    return np.concatenate([g["o"], ~g["o"]], axis=1)


def score_gemm(base=0):
    return isa.GemmQk(seg=base + KSEG, seg_stride=0, block_keys=KEYS, tile0=0, tiles=KEYS // P, tokens=TOKENS,
                      heads=HEADS, head_stride=RB, src=Q_AT, src_stride=HEADS * RB, dst=SC_AT, dst_stride=KEYS // VL)


def check(g, read):
    """``read(beat, rows, n)`` -> SPAD words [rows, n] (int64): every result against the golden."""
    R = TOKENS * HEADS
    assert np.array_equal(i32(read(SC_AT, R, KEYS // VL * VL)), g["s"]), "scores"
    assert np.array_equal(i32(read(W_AT, R, KEYS)), g["w"]), "w rows differ from attn_weights"
    assert np.array_equal(i32(read(OUT_AT, 1, VL))[0, :R], g["m"]), "maxima differ from partial_state"
    state = i32(read(OUT_AT + 4, 1, R * (D + 2))).reshape(R, D + 2)
    assert np.array_equal(state[:, 0], g["m"]) and np.array_equal(state[:, 1], g["l"]), "m, l"
    assert not state[:, 2:].any(), "ATTN_SM touched o"
    assert np.array_equal(i32(read(OUT_AT + 4 + R * (D + 2) // VL, R, D)), g["final"]), "FINAL differs from finalize"


@cocotb.test()
async def run_softmax(dut):
    from mcf.sim.cocotb_util import params
    from mcf.sim.compute.exec_driver import ExecDriver
    p = params()
    rng = np.random.default_rng(p.get("seed", 1))
    drv = ExecDriver(dut, seed=p.get("seed", 1))
    await drv.start()
    sp = Spad(drv, vl=VL)
    g = golden(rng)
    R = TOKENS * HEADS
    await sp.put(Q_AT, g["qm"], g["qe"])
    await sp.put(O_AT, o_rows(g))
    drv.ram.write(KSEG, pack_segment(*g["k"]))
    drv.ram.write(VSEG, pack_segment(*g["v"]))
    await drv.must(score_gemm())
    cycles = {}
    for ins in program():
        out = await drv.must(ins)
        if ins.OPCODE == isa.Opcode.ATTN_SM:
            cycles.setdefault(ins.phase.name, []).append((ins.keys, out.cycles))
    store = {}
    for beat, rows, n in ((SC_AT, R, KEYS), (W_AT, R, KEYS), (OUT_AT, 1, VL), (OUT_AT + 4, 1, R * (D + 2)),
                          (OUT_AT + 4 + R * (D + 2) // VL, R, D)):
        store[beat] = (await sp.get(beat, rows, n))[0]
    check(g, lambda beat, rows, n: store[beat])
    # APPLY over a run of V blocks (the unit's m is the MAX passes'): the same w rows
    from tests.hw.compute.exec.test_scores import write_run
    for bk, stride in ((10, 192), (20, 256)):   # 10: a frame per block (20-byte words), 20: one frame
        write_run(drv.ram, VSEG + 0x1000, stride, *g["v"], bk)
        sm = program()[4]
        await drv.must(sm.replace(keys=KEYS, seg=VSEG + 0x1000, w=W2_AT, block_keys=bk,
                                  seg_stride=stride // isa.DDR_ALIGN))
        got, _ = await sp.get(W2_AT, R, KEYS)
        assert np.array_equal(i32(got), g["w"]), f"APPLY over blocks of {bk} keys: w rows differ"
    # a last group of fewer than sm_apply_beats beats (keys - VL): its w beats alone written, the next
    # beat of each row untouched; w at an odd beat (a beat a write) and at an even one (wide writes)
    ab = Geometry.from_config(CFG).sm_apply_beats
    assert ab == 2
    for w_at in (W2_AT + 1, W2_AT):
        fill = rng.integers(-(1 << 31), 1 << 31, size=(R * KEYS // VL, VL))
        await sp.put(w_at, fill)
        out = await drv.must(program()[4].replace(keys=KEYS - VL, first=0, w=w_at))
        got, _ = await sp.get(w_at, R, KEYS)
        want = i32(fill.reshape(R, KEYS).copy())
        want[:, :KEYS - VL] = g["w"][:, :KEYS - VL]
        assert np.array_equal(i32(got), want), f"APPLY of {KEYS - VL} keys, w at {w_at}"
        cycles["APPLY"].append((KEYS - VL, out.cycles, w_at % ab == 0))
    # MAX with defer: the next GEMM_QK's score words (no SPAD read): over every key (first), m == golden; then
    # first = 0 over its words 0 .. 11 as keys at positions 22 .. (those past a row's position invisible; a
    # last write of fewer keys than words): m = max(m, their visible maxima)
    rows = dict(tokens=TOKENS, heads=HEADS, tok_stride=HEADS * RB, head_stride=RB)
    await drv.must(isa.AttnQ(what=AttnLoad.QUERY, spad=Q_AT, qpos0=QPOS0, **rows))
    dmax = program()[1].replace(keys=KEYS, defer=1)
    out = await drv.must(dmax)
    cycles["DEFER"] = [(KEYS, out.cycles)]
    await drv.must(score_gemm())
    await drv.must(isa.AttnEmit(mode=EmitMode.MAX, spad=W2_AT, **rows))
    assert np.array_equal(i32((await sp.get(W2_AT, 1, VL))[0])[0, :R], g["m"]), "deferred MAX: m"
    await drv.must(dmax.replace(first=0, keys=12, kpos0=22))
    await drv.must(score_gemm())
    await drv.must(isa.AttnEmit(mode=EmitMode.MAX, spad=W2_AT, **rows))
    pos = np.repeat(QPOS0 + np.arange(TOKENS), HEADS)
    vis = (22 + np.arange(12))[None, :] <= pos[:, None]
    want = np.maximum(g["m"], np.where(vis, g["s"][:, :12], fx.INT32_MIN).max(axis=-1))
    assert np.array_equal(i32((await sp.get(W2_AT, 1, VL))[0])[0, :R], want), "deferred MAX, first = 0: m"
    # a MAX deferred at a program's end (no GEMM_QK after it) is dropped when the next program starts: that
    # program's GEMM_QK (a tile: keys 0 .. P - 1) leaves m as it was (golden NodeSim.start; before round 21 the
    # stale MAX took its words, first: m = the visible maxima of those keys)
    await drv.must(dmax)
    await drv.program_start()
    await drv.must(score_gemm().replace(tiles=1))
    await drv.must(isa.AttnEmit(mode=EmitMode.MAX, spad=W2_AT, **rows))
    stale = np.where((np.arange(P)[None, :] <= pos[:, None]), g["s"][:, :P], fx.INT32_MIN).max(axis=-1)
    assert not np.array_equal(stale, want)
    assert np.array_equal(i32((await sp.get(W2_AT, 1, VL))[0])[0, :R], want), "a stale deferred MAX took a GEMM_QK"
    # ATTN_Q ROWS: a cycle a token and the start (attn_rows_cycles), not a SPAD beat a cycle; then the same m
    from mcf.sim.compute.cost import attn_rows_cycles
    for i, ins in enumerate(rows_program()):
        out = await drv.must(ins)
        if i == 1:
            assert out.cycles < 20 and abs(out.cycles - attn_rows_cycles(TOKENS)) <= 1, \
                f"ATTN_Q ROWS: {out.cycles} cycles (model {attn_rows_cycles(TOKENS)})"
    got = i32((await sp.get(W2_AT, 2, VL))[0])
    assert (got[0, :R] == fx.M_EMPTY).all() and np.array_equal(got[1, :R], g["m"]), "ATTN_Q ROWS: m"
    assert (await drv.run(rows_refused())).fault == SeqFault.ILLEGAL_INSTRUCTION, "ATTN_KV after ROWS"
    # the cycle model (sim/compute/cost.py, the ISA model's ATTN_SM cost) within 4 cycles (MAX) or 12
    # (APPLY: its V scale words come from DDR with random pauses)
    for phase, runs in cycles.items():
        for keys, c, *wide in runs:
            model = softmax_pass_cycles(keys, R, VL, phase == "APPLY", max(CFG.mac_lanes // VL, 1), ab, *wide,
                                        **({"defer": True} if phase == "DEFER" else {}))
            assert abs(c - model) <= (12 if phase == "APPLY" else 4 if phase == "MAX" else 1), \
                f"ATTN_SM {phase}: {c} cycles for {keys} keys, model {model} (all: {cycles})"
    # refused: no keys, keys not a multiple of VL, more rows than the unit's state rows (sm_rows), rows past
    # the SPAD
    sm = program()[1]
    for bad in (dict(keys=0), dict(keys=VL + 1), dict(tokens=CFG.sm_rows // HEADS + 1), dict(scores=CFG.spad_beats - 2),
                dict(phase=AttnPass.APPLY, w=CFG.spad_beats - 2)):
        assert (await drv.run(sm.replace(**bad))).fault == SeqFault.ILLEGAL_INSTRUCTION, bad


@cocotb.test()
async def run_o_emit(dut):
    """ATTN_Q O over rows at their own strides and ATTN_EMIT FINAL to strided rows, W words a cycle
    (``out_words``) each way, on the node of ``params()["node"]`` (default ``CFG``): the scores
    LOADed (no GEMM), ATTN_Q QUERY and ATTN_SM MAX / APPLY give m and l; o rows (random int32, the
    extremes included) at head_stride 2 RB + 1, tok_stride heads (2 RB + 1) + 2 among random words;
    FINAL == golden ``finalize`` at head_stride RB + 2, tok_stride heads (RB + 2) + 3, the words
    between them untouched; STATE == ``encode_state``; MAX == m.  The cycles of O and the emits against the
    cycle model (sim/compute/cost.py ``attn_o_cycles``, ``attn_emit_cycles``)."""
    from mcf.sim.cocotb_util import params
    from mcf.sim.compute.cost import attn_emit_cycles, attn_o_cycles
    from mcf.sim.compute.exec_driver import ExecDriver
    p = params()
    node = NodeConfig(**p["node"]) if "node" in p else CFG
    vl, d = node.vec_lanes, node.head_dim
    tokens, heads, keys = p.get("oe_tokens", 2), p.get("oe_heads", 2), 4 * vl
    R, rb, kb = tokens * heads, d // vl, keys // vl
    assert R <= node.sm_rows
    rng = np.random.default_rng(p.get("seed", 1) + 7)
    drv = ExecDriver(dut, seed=p.get("seed", 1), axi_period_ps=p.get("axi_period_ps"))
    await drv.start()
    sp = Spad(drv, vl=vl)
    qm, qe = bfp_rows(rng, R, d)
    s = rng.integers(-(1 << 18), 1 << 18, size=(R, keys)) + rng.integers(-(1 << 20), 1 << 20, size=(R, 1))
    vq, va, ve = fx.quantize_kv(bfp_rows(rng, keys, d))
    drv.ram.write(VSEG, pack_segment(vq, va, ve))
    o = rng.integers(-(1 << 31), 1 << 31, size=(R, d))
    o[0, :3] = (fx.INT32_MIN, (1 << 31) - 1, 0)
    qa, sa, wa, oa, fa, sta = 0, R * rb, R * (rb + kb), R * (rb + 2 * kb), R * (rb + 2 * kb) + R * (2 * rb + 3), 0
    hs, ts = 2 * rb + 1, heads * (2 * rb + 1) + 2                 # O rows
    fhs, fts = rb + 2, heads * (rb + 2) + 3                       # FINAL rows
    sta = fa + tokens * fts
    ma = sta + -(-R * (d + 2) // vl)
    await sp.put(qa, qm, qe)
    await sp.put(sa, s)
    region = rng.integers(-(1 << 31), 1 << 31, size=(tokens * ts, vl))  # the O rows among random words
    for r in range(R):
        at = (r // heads) * ts + (r % heads) * hs
        region[at:at + rb] = o[r].reshape(rb, vl)
    await sp.put(oa, region)
    fill = rng.integers(-(1 << 31), 1 << 31, size=(tokens * fts, vl))
    await sp.put(fa, fill)
    qpos0 = keys - tokens
    rows = dict(tokens=tokens, heads=heads, tok_stride=heads * rb, head_stride=rb)
    await drv.must(isa.AttnQ(what=AttnLoad.QUERY, spad=qa, qpos0=qpos0, **rows))
    sm = dict(scores=sa, s_stride=kb, keys=keys, kpos0=0, seg=VSEG, w=wa, w_stride=kb, tokens=tokens, heads=heads)
    for phase in (AttnPass.MAX, AttnPass.APPLY):
        await drv.must(isa.AttnSm(phase=phase, first=1, **sm))
    cyc = {}
    cyc["O"] = (await drv.must(isa.AttnQ(what=AttnLoad.O, spad=oa, qpos0=0, tokens=tokens, heads=heads,
                                         tok_stride=ts, head_stride=hs))).cycles
    cyc["FINAL"] = (await drv.must(isa.AttnEmit(mode=EmitMode.FINAL, spad=fa, tokens=tokens, heads=heads,
                                                tok_stride=fts, head_stride=fhs))).cycles
    cyc["STATE"] = (await drv.must(isa.AttnEmit(mode=EmitMode.STATE, spad=sta, **rows))).cycles
    cyc["MAX"] = (await drv.must(isa.AttnEmit(mode=EmitMode.MAX, spad=ma, **rows))).cycles
    # golden: row r = t heads + h at position qpos0 + t, as one query of R heads over one KV head
    valid = np.repeat(fx.causal_mask(qpos0 + np.arange(tokens), np.arange(keys)), heads, axis=0)
    m = np.where(valid, s, fx.INT32_MIN).max(axis=-1)
    l, _ = fx.state_sums(s[:, None], valid[:, None], vq[:, None], va[:, None], ve[:, None], R, m[:, None])
    st = fx.State(m[:, None], fx.sat(l, 32), o[:, None, :])
    want_final = fx.finalize(st).reshape(R, d)
    got = i32((await sp.get(fa, tokens * fts, vl))[0])
    want = i32(fill.copy())
    for r in range(R):
        at = (r // heads) * fts + (r % heads) * fhs
        want[at:at + rb] = want_final[r].reshape(rb, vl)
    assert np.array_equal(got, want), "FINAL rows differ from finalize (or a word between them changed)"
    state = i32((await sp.get(sta, 1, R * (d + 2)))[0]).reshape(R, d + 2)
    assert np.array_equal(state, fx.encode_state(st).reshape(R, d + 2)), "STATE differs from encode_state"
    assert np.array_equal(i32((await sp.get(ma, 1, -(-R // vl) * vl))[0])[0, :R], m), "MAX differs from the row maxima"
    model = {"O": attn_o_cycles(R, d, vl), **{e.name: attn_emit_cycles(e, R, d, vl) for e in EmitMode}}
    dut._log.info(f"ATTN_Q O / ATTN_EMIT cycles {cyc}, model {model}")
    if p.get("oe_report"):
        import json
        with open(p["oe_report"], "w") as f:
            json.dump({"rows": R, "head_dim": d, "vec_lanes": vl, "cycles": cyc, "model": model}, f)
    for k, c in cyc.items():
        assert abs(c - model[k]) <= 2, f"{k}: {c} cycles, model {model[k]} (all: {cyc})"
    if R > node.att_rows:
        # rows past att_rows have no products, but MREF / STATE reach them (their m, l, o): a state of new
        # words loaded over every row (STATE) is emitted unchanged, then new maxima (MREF) emitted by MAX
        st3 = fx.State(m[:, None] // 2, fx.sat(l, 32) // 2, ~o[:, None, :])
        words3 = fx.encode_state(st3).reshape(-1)
        await sp.put(sta, np.concatenate([words3, np.zeros(-len(words3) % vl, np.int64)]).reshape(-1, vl))
        await drv.must(isa.AttnQ(what=AttnLoad.STATE, spad=sta, qpos0=0, **rows))
        await drv.must(isa.AttnEmit(mode=EmitMode.STATE, spad=sta, **rows))
        assert np.array_equal(i32((await sp.get(sta, 1, R * (d + 2)))[0]).reshape(-1), words3), "STATE over every row"
        m3 = rng.integers(-(1 << 30), 1 << 30, size=-(-R // vl) * vl)
        await sp.put(ma, m3.reshape(-1, vl))
        await drv.must(isa.AttnQ(what=AttnLoad.MREF, spad=ma, qpos0=0, **rows))
        await drv.must(isa.AttnEmit(mode=EmitMode.MAX, spad=ma, **rows))
        assert np.array_equal(i32((await sp.get(ma, 1, -(-R // vl) * vl))[0])[0, :R], m3[:R]), "MREF over every row"
        # ATTN_KV after their QUERY refused
        ins = isa.AttnKV(phase=AttnPass.MAX, seg=VSEG, v_off=0, seg_stride=0, blocks=1, keys=vl, kpos0=0,
                         pos_stride=0, block0=0, block_stride=0, gated=0, first=1)
        assert (await drv.run(ins)).fault == SeqFault.ILLEGAL_INSTRUCTION, ins
        # a QUERY of att_rows rows makes ATTN_KV legal again
        n_t = node.att_rows // heads
        await drv.must(isa.AttnQ(what=AttnLoad.QUERY, spad=qa, qpos0=qpos0, **{**rows, "tokens": n_t}))
        await drv.must(isa.AttnKV(phase=AttnPass.MAX, seg=VSEG, v_off=0, seg_stride=0, blocks=1, keys=vl, kpos0=0,
                                  pos_stride=0, block0=0, block_stride=0, gated=0, first=1))


def test_softmax_nodesim():
    """The same program on the golden node simulator (NodeSim._x_attn_sm, ATTN_Q O)."""
    from mcf.sw.golden.node import ClusterSim
    c = ClusterSim(CFG, 1, ddr_bytes=1 << 18)
    c.open_window()
    n = c.nodes[0]
    base = n.ddr.phys_base
    g = golden(np.random.default_rng(3))
    R = TOKENS * HEADS
    n.spad[Q_AT:Q_AT + R * RB] = g["qm"].reshape(-1, VL)
    n.spad_exp[Q_AT:Q_AT + R * RB] = np.repeat(g["qe"], RB)
    n.spad[O_AT:O_AT + 2 * R * RB] = o_rows(g).reshape(-1, VL)
    n.ddr.device_write(base + KSEG, pack_segment(*g["k"]))
    n.ddr.device_write(base + VSEG, pack_segment(*g["v"]))
    c.load_program(0, [score_gemm(base), *program(base), isa.End()])
    c.start()
    assert c.run(max_cycles=1 << 20).ok
    check(g, lambda beat, rows, n_: n.spad[beat:beat + rows * n_ // VL].reshape(rows, n_))
    # MAX with defer (as run_softmax): over the next GEMM_QK's words, then first = 0 over words 0 .. 11 at 22 ..
    rows = dict(tokens=TOKENS, heads=HEADS, tok_stride=HEADS * RB, head_stride=RB)
    dmax = program(base)[1].replace(keys=KEYS, defer=1)
    c.load_program(0, [program(base)[0], dmax, score_gemm(base), isa.AttnEmit(mode=EmitMode.MAX, spad=W2_AT, **rows),
                       dmax.replace(first=0, keys=12, kpos0=22), score_gemm(base),
                       isa.AttnEmit(mode=EmitMode.MAX, spad=W2_AT + 1, **rows), isa.End()])
    c.start()
    assert c.run(max_cycles=1 << 20).ok
    pos = np.repeat(QPOS0 + np.arange(TOKENS), HEADS)
    vis = (22 + np.arange(12))[None, :] <= pos[:, None]
    want = np.maximum(g["m"], np.where(vis, g["s"][:, :12], fx.INT32_MIN).max(axis=-1))
    assert np.array_equal(n.spad[W2_AT, :R], g["m"]) and np.array_equal(n.spad[W2_AT + 1, :R], want), "deferred MAX"
    # a MAX deferred at a program's end is dropped when the next starts (as run_softmax): m as it was
    c.load_program(0, [dmax, isa.End()])
    c.start()
    assert c.run(max_cycles=1 << 20).ok
    c.load_program(0, [score_gemm(base).replace(tiles=1), isa.AttnEmit(mode=EmitMode.MAX, spad=W2_AT, **rows), isa.End()])
    c.start()
    assert c.run(max_cycles=1 << 20).ok
    assert np.array_equal(n.spad[W2_AT, :R], want), "a stale deferred MAX took a GEMM_QK"
    # ATTN_Q ROWS (as run_softmax): m emptied, then the deferred MAX's m at ROWS' positions; ATTN_KV after it refused
    c.load_program(0, [*rows_program(base), isa.End()])
    c.start()
    assert c.run(max_cycles=1 << 20).ok
    assert (n.spad[W2_AT, :R] == fx.M_EMPTY).all() and np.array_equal(n.spad[W2_AT + 1, :R], g["m"]), "ROWS: m"
    c2 = ClusterSim(CFG, 1, ddr_bytes=1 << 18)
    c2.open_window()
    c2.load_program(0, [*rows_program(base)[:2], rows_refused(base), isa.End()])
    c2.start()
    r = c2.run(max_cycles=1 << 20)
    assert r.status == "fault" and c2.nodes[0].fault_cause == SeqFault.ILLEGAL_INSTRUCTION, "ATTN_KV after ROWS"
    # refused like the RTL (and a pass over rows the unit does not hold)
    sm = program(base)[1]
    for bad in (dict(keys=0), dict(keys=VL + 1), dict(tokens=3), dict(tokens=1)):
        c2 = ClusterSim(CFG, 1, ddr_bytes=1 << 18)
        c2.open_window()
        n2 = c2.nodes[0]
        c2.load_program(0, [program(base)[0], sm.replace(**bad), isa.End()])
        c2.start()
        r = c2.run(max_cycles=1 << 20)
        assert r.status == "fault" and n2.fault_cause == SeqFault.ILLEGAL_INSTRUCTION, bad
    # a QUERY of sm_rows = 8 rows (twice att_rows) is legal, and MREF and STATE over its rows; ATTN_KV after it
    # is not (rows without products), as in the RTL (run_o_emit)
    wide = dict(tokens=CFG.sm_rows // HEADS, heads=HEADS, tok_stride=HEADS * RB, head_stride=RB)
    query = isa.AttnQ(what=AttnLoad.QUERY, spad=Q_AT, qpos0=QPOS0, **wide)
    kv_max = isa.AttnKV(phase=AttnPass.MAX, seg=base + KSEG, v_off=0, seg_stride=0, blocks=1, keys=KEYS, kpos0=0,
                        pos_stride=0, block0=0, block_stride=0, gated=0, first=1)
    for prog, ok in (([query], True), ([query, kv_max], False),
                     ([query, isa.AttnQ(what=AttnLoad.MREF, spad=O_AT, qpos0=0, **wide)], True),
                     ([query, isa.AttnQ(what=AttnLoad.STATE, spad=O_AT, qpos0=0, **wide)], True)):
        c2 = ClusterSim(CFG, 1, ddr_bytes=1 << 18)
        c2.open_window()
        c2.load_program(0, [*prog, isa.End()])
        c2.start()
        r = c2.run(max_cycles=1 << 20)
        assert r.ok if ok else (r.status == "fault" and c2.nodes[0].fault_cause == SeqFault.ILLEGAL_INSTRUCTION), prog


# --- the rate (``mcf bench compute``: attn:softmax, and test_softmax_rate below) ----------------
@cocotb.test()
async def run_sm_ops(dut):
    """ATTN_SM MAX then APPLY on the unit of ``params()["node"]`` over ``sm.keys`` keys for
    ``sm.tokens`` x the GQA group rows (``sm.heads``, default the node's group): score rows (golden
    scores' range: random int32 with a spread of 2^18) and query rows LOADed, a V segment in DDR
    (only its scale words are read), with the DDR model when ``timing`` is given; the w rows
    STOREd and compared with golden ``attn_weights`` bit for bit; the cycles of each pass to
    ``sm_report`` (JSON)."""
    import json
    from mcf.sim.cocotb_util import params
    from mcf.sim.compute import ddr
    from mcf.sim.compute.exec_driver import ExecDriver
    from mcf.sim.ddr_model import DdrTiming
    p = params()
    node = NodeConfig(**p["node"])
    q = p["sm"]
    vl, d, keys = node.vec_lanes, node.head_dim, q["keys"]
    heads = q.get("heads", node.group)
    tokens = q["tokens"]
    R = tokens * heads
    rng = np.random.default_rng(p.get("seed", 1))
    timing = DdrTiming(**p["timing"]) if p.get("timing") else None
    drv = ExecDriver(dut, ram_bytes=p.get("ram_bytes", 1 << 20), timing=timing, axi_period_ps=p.get("axi_period_ps"),
                     pause=0.0 if timing else 0.2)
    await drv.start()
    v_at, x_at, w_out = 0x40000, 0x10000, 0x80000
    vq, va, ve = fx.quantize_kv(bfp_rows(rng, keys, d))
    drv.ram.write(v_at, pack_segment(vq, va, ve))
    qm, qe = bfp_rows(rng, R, d)
    rb, sb = d // vl, keys // vl
    s = rng.integers(-(1 << 18), 1 << 18, size=(R, keys)) + rng.integers(-(1 << 20), 1 << 20, size=(R, 1))
    drv.ram.write(x_at, ddr.rows_bytes(qm, vl, qe))
    await drv.must(isa.Load(ddr=x_at, spad=0, beats=R * rb, row_beats=rb))
    drv.ram.write(x_at, ddr.rows_bytes(s, vl))
    sc = R * rb
    await drv.must(isa.Load(ddr=x_at, spad=sc, beats=R * sb, row_beats=0))
    rows = dict(tokens=tokens, heads=heads, tok_stride=heads * rb, head_stride=rb)
    out = {}
    qpos = np.arange(tokens) + keys - tokens         # the last token sees every key, the others fewer
    await drv.must(isa.AttnQ(what=AttnLoad.QUERY, spad=0, qpos0=int(qpos[0]), **rows))
    wa = sc + R * sb
    sm = dict(scores=sc, s_stride=sb, keys=keys, kpos0=0, seg=v_at, w=wa, w_stride=sb, tokens=tokens, heads=heads)
    for phase in (AttnPass.MAX, AttnPass.APPLY):
        res = await drv.must(isa.AttnSm(phase=phase, first=1, **sm), max_cycles=10_000_000)
        out[phase.name] = {"cycles": res.cycles, "stall_ex_ddr": res.perf.get("stall_ex_ddr", 0)}
    await drv.must(isa.Store(ddr=w_out, spad=wa, beats=R * sb, row_beats=0))
    got = np.frombuffer(drv.ram.read(w_out, R * keys * 4), dtype="<i4").reshape(R, keys)
    valid = np.repeat(fx.causal_mask(qpos, np.arange(keys)), heads, axis=0)            # row t heads + h
    m = np.where(valid, s, fx.INT32_MIN).max(axis=-1)
    _, w = fx.attn_weights(s[:, None], valid[:, None], va[:, None], ve[:, None], R, m[:, None])
    assert np.array_equal(got, w[:, 0]), "ATTN_SM w rows differ from attn_weights"
    with open(p["sm_report"], "w") as f:
        json.dump({"ops": [{"name": "attn:softmax", "tokens": tokens, "heads": heads, "rows": R, "keys": keys,
                            "vec_lanes": vl, **{k.lower(): v for k, v in out.items()}}]}, f)


@pytest.mark.slow
@pytest.mark.cocotb
def test_softmax_rate(build_dir, tmp_path):
    """ATTN_SM's rate at 12 rows (2 tokens x a GQA group of 6) and VL = 8 over 512 keys, on a
    small node with the Qwen node's VL and R / VL = 1.5 (cocotb + Icarus, AxiRam without the DDR
    model): prints the cycles per key and checks them against the cycle model (sim/compute/cost.py).
    ``make test`` skips it (slow); run: .venv/bin/python -m pytest -m slow -s -k softmax_rate."""
    import json
    from mcf.hw.compute.exec.unit import ExecUnit
    from mcf.sim.runner import run_cocotb
    node = NodeConfig.tiny(att_rows=12, max_tokens=16, vec_lanes=8)
    report = tmp_path / "sm.json"
    run_cocotb(ExecUnit(node), __name__, build_dir, testcase=["run_sm_ops"],
               params={"node": node.as_dict(), "sm": {"keys": 512, "tokens": 2, "heads": 6},
                       "sm_report": str(report), "seed": 2})
    op = json.loads(report.read_text())["ops"][0]
    for phase in ("max", "apply"):
        c = op[phase]["cycles"]
        model = softmax_pass_cycles(op["keys"], op["rows"], op["vec_lanes"], phase == "apply",
                                    max(node.mac_lanes // op["vec_lanes"], 1), Geometry.from_config(node).sm_apply_beats)
        print(f"ATTN_SM {phase.upper()}: R = {op['rows']}, VL = {op['vec_lanes']}, {op['keys']} keys: {c} cycles, "
              f"{c / op['keys']:.3f} cycles a key (model {model})")
        assert abs(c - model) <= 12, (phase, c, model)


@pytest.mark.slow
@pytest.mark.cocotb
def test_o_emit_cocotb(build_dir):
    """``run_o_emit`` on a node whose VL (8) is twice the unit's lanes (4): W = 4 words a cycle,
    two slices a SPAD beat each way (the W = VL case runs in ``make test`` on GEMM kv's build,
    test_scores.py; this one is a build of its own, ~45 s: slow)."""
    from mcf.hw.compute.exec.unit import ExecUnit
    from mcf.sim.runner import run_cocotb
    node = NodeConfig.tiny(mac_rows=16, vec_lanes=8)
    run_cocotb(ExecUnit(node), __name__, build_dir, testcase=["run_o_emit"], params={"node": node.as_dict(), "seed": 3})
