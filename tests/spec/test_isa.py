"""The instruction set (spec/isa.py): hand-built encodings, round trips of every opcode, refusals."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcf.spec import isa
from mcf.spec.bits import SpecError


def test_hand_built_words():
    assert isa.End().encode() == 1
    s = isa.Sync(on=isa.Queue.TX, wait_sem=3, wait_cnt=2, sig_sem=5, sig=1)
    assert s.encode() == 2 | 3 << 6 | 2 << 11 | 5 << 17 | 1 << 22 | 1 << 32
    ld = isa.Load(ddr=0x1000, spad=7, beats=3, row_beats=0)
    assert ld.encode() == 3 | (0x1000 // 64) << 32 | 7 << 74 | 3 << 94
    # a signed field stores its two's complement bits
    g = isa.Gemm(blob=0, n=1, total_tiles=1, tile0=0, tiles=1, tokens=1, group_log2=0, w_exp=-1, bias=0,
                 src=0, src_stride=0, dst=0, dst_stride=0)
    assert (g.encode() >> 152) & 0xFF == 0xFF and isa.decode(g.encode()).w_exp == -1


def test_every_layout_is_256_bits_and_queues_are_named():
    assert set(isa.LAYOUTS) == set(isa.Opcode) == set(isa.CLASSES)
    for op, layout in isa.LAYOUTS.items():
        assert layout.total_bits == isa.INSTR_BITS
        assert op == isa.Opcode.SYNC or op in isa.QUEUE_OF
    assert isa.Sync(on=isa.Queue.RX).queue == isa.Queue.RX
    assert isa.Recv(tag=1, ddr=0, length=1, done_sem=0, credit=0, credit_dst=0, credit_route=0,
                    credit_sem=0).queue == isa.Queue.RX


def _values(layout, draw):
    out = {}
    for f in layout.fields:
        if f.reserved or f.name == "op":
            continue
        if f.enum is not None:
            out[f.name] = draw(st.sampled_from(list(f.enum)))
        elif f.signed:
            out[f.name] = draw(st.integers(-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1))
        else:
            v = draw(st.integers(0, f.max))
            out[f.name] = v * isa.DDR_ALIGN if f.name in ("ddr", "ids", "table", "blob", "seg") else v
    return out


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_round_trip_every_opcode(data):
    op = data.draw(st.sampled_from(list(isa.Opcode)))
    ins = isa.CLASSES[op](**_values(isa.LAYOUTS[op], data.draw))
    word = ins.encode()
    assert word & 0x3F == op and isa.decode(word) == ins
    assert isa.decode_program(isa.encode_program([ins, isa.End()])) == [ins, isa.End()]


@pytest.mark.parametrize("bad", [
    lambda: isa.decode(0),                                   # opcode 0: zeroed memory
    lambda: isa.decode(63),                                  # no such opcode
    lambda: isa.decode(1 | 1 << 200),                        # reserved bits
    lambda: isa.decode(1 << 256),
    lambda: isa.Load(ddr=65, spad=0, beats=1, row_beats=0),  # unaligned DDR address
    lambda: isa.Load(ddr=0, spad=1 << 20, beats=1, row_beats=0),
    lambda: isa.Vec(vop=9, n=1, rows=1, a=0, a_stride=0, b=0, b_stride=0, b_rep=1, b_pair=0, dst=0,
                    dst_stride=0, imm0=0, imm1=0),
    lambda: isa.End(sig=2),
    lambda: isa.encode_program([isa.End(), "END"]),
    lambda: isa.decode_program(bytes(33)),
    lambda: isa.BlobLayout(n=60, tiles=1, rows=4, lanes=8, group=16),
])
def test_refused(bad):
    with pytest.raises(SpecError):
        bad()


def test_blob_layout():
    b = isa.BlobLayout(n=64, tiles=16, rows=4, lanes=8, group=16)
    assert (b.w_tile, b.s_tile, b.b_tile) == (128, 32, 16)
    assert b.s_offset == 16 * 128 and b.b_offset == 16 * 128 + 512 and b.total_bytes == 2816
    assert isa.embed_row_bytes(64, 16) == 64 + 64 and isa.embed_row_bytes(1536, 128) == 768 + 64
    assert isa.rope_word(-1, 2) == 0x0002FFFF
