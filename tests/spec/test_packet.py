"""The wire format: every field round-trips, out-of-range values and malformed headers are refused."""
import pytest
from hypothesis import given, strategies as st

from mcf import spec
from mcf.spec import META, Meta, Packet, SpecError


def meta_strategy():
    return st.builds(
        Meta,
        stage=st.sampled_from(list(spec.Stage)), op=st.sampled_from(list(spec.Op)),
        collective=st.sampled_from(list(spec.Collective)), reduce_op=st.sampled_from(list(spec.ReduceOp)),
        src=st.integers(0, META["src"].max), dst=st.integers(0, META["dst"].max),
        route_id=st.integers(0, META["route_id"].max), kv_id=st.integers(0, META["kv_id"].max),
        length=st.integers(0, META["length"].max), seq=st.integers(0, META["seq"].max))


def test_required_capacity():
    """The brief's minimums: >= 64 nodes, >= 2^20 KV block ids, payloads of >= 64 KiB."""
    assert spec.MAX_NODES >= 64
    assert META["kv_id"].max + 1 >= 2 ** 20
    assert spec.MAX_PAYLOAD_BYTES >= 64 * 1024
    assert META.total_bits == spec.HEADER_BITS == 128


def test_field_positions_are_the_documented_ones():
    # Hand-written from docs/reference.md: a change here is a wire-format change.
    expected = {"magic": (0, 8), "stage": (8, 2), "op": (10, 4), "collective": (14, 3),
                "reduce_op": (17, 3), "src": (20, 8), "dst": (28, 8), "route_id": (36, 12),
                "kv_id": (48, 24), "length": (72, 24), "seq": (96, 16), "reserved": (112, 8),
                "check": (120, 8)}
    assert {f.name: (META.offsets[f.name], f.width) for f in META.fields} == expected


def test_known_encoding():
    """One header encoded by hand, byte for byte."""
    m = Meta(stage=spec.Stage.DECODE, op=spec.Op.QUERY, collective=spec.Collective.MULTICAST,
             reduce_op=spec.ReduceOp.NONE, src=0x12, dst=0x34, route_id=0xABC, kv_id=0x0F0E0D,
             length=0x010203, seq=0xBEEF)
    word = (0xA5 | 1 << 8 | 5 << 10 | 1 << 14 | 0 << 17 | 0x12 << 20 | 0x34 << 28 | 0xABC << 36
            | 0x0F0E0D << 48 | 0x010203 << 72 | 0xBEEF << 96)
    body = word.to_bytes(16, "little")
    check = 0
    for b in body[:15]:
        check ^= b
    assert m.encode() == body[:15] + bytes([check])


@given(meta_strategy())
def test_round_trip(meta):
    data = meta.encode()
    assert len(data) == spec.HEADER_BYTES
    assert Meta.decode(data) == meta
    assert Meta.from_int(meta.to_int()) == meta


@given(meta_strategy(), st.integers(0, 127))
def test_any_single_bit_flip_is_detected(meta, bit):
    word = meta.to_int() ^ (1 << bit)
    with pytest.raises(SpecError, match="malformed"):
        Meta.from_int(word)


@pytest.mark.parametrize("field,value", [
    ("src", 256), ("dst", -1), ("route_id", 4096), ("kv_id", 1 << 24), ("length", 1 << 24),
    ("seq", 1 << 16), ("op", 0), ("op", 99), ("stage", 3), ("collective", 7), ("reduce_op", 5),
])
def test_out_of_range_names_field_and_range(field, value):
    good = dict(stage=0, op=1, collective=0, reduce_op=0, src=0, dst=0, route_id=0, kv_id=0, length=0, seq=0)
    with pytest.raises(ValueError, match=field) as exc:
        Meta(**{**good, field: value})
    if META[field].enum is None:
        assert f"[0, {META[field].max}]" in str(exc.value)


def test_bool_and_float_are_refused():
    with pytest.raises(ValueError, match="src"):
        Meta(stage=0, op=1, collective=0, reduce_op=0, src=1.0, dst=0, route_id=0, kv_id=0, length=0)


def test_truncated_and_malformed_headers():
    m = Meta(stage=0, op=1, collective=0, reduce_op=0, src=1, dst=2, route_id=3, kv_id=4, length=0)
    with pytest.raises(SpecError, match="truncated"):
        Meta.decode(m.encode()[:15])
    with pytest.raises(SpecError, match="malformed"):
        Meta.decode(bytes(16))  # all zero: no magic
    bad = bytearray(m.encode())
    bad[14] = 0x01               # reserved byte set, check byte fixed up
    bad[15] ^= 0x01
    with pytest.raises(SpecError, match="reserved"):
        Meta.decode(bytes(bad))


@given(meta_strategy().filter(lambda m: m.length <= 300), st.sampled_from([32, 64, 128, 256]), st.data())
def test_packet_beats(meta, width, data):
    payload = data.draw(st.binary(min_size=meta.length, max_size=meta.length))
    pkt = Packet(meta, payload)
    beats = spec.to_beats(pkt, width)
    nb = width // 8
    hb = spec.header_beats(width)
    assert len(beats) == hb + -(-len(payload) // nb)
    assert [b[2] for b in beats] == [False] * (len(beats) - 1) + [True]
    wire = b"".join(d.to_bytes(nb, "little")[:bin(k).count("1")] for d, k, _ in beats)
    assert wire[:16] == meta.encode() and wire[hb * nb:] == payload
    assert Packet.decode(pkt.encode()) == pkt


def test_packet_length_mismatch():
    m = Meta(stage=0, op=1, collective=0, reduce_op=0, src=1, dst=2, route_id=3, kv_id=4, length=4)
    with pytest.raises(SpecError, match="payload has 3 bytes"):
        Packet(m, b"abc")
    with pytest.raises(SpecError, match="malformed Packet"):
        Packet.decode(m.encode() + b"abcde")
