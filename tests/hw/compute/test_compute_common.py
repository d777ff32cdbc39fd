"""What the compute units share (hw/compute/common.py): the buffer write port and the state
enums sized for their state registers."""
from mcf.hw.compute.common import AttentionState, KVWriterState, MemWriteSignature, VectorState


def test_write_port_and_state_enums():
    m = MemWriteSignature(5, 128).members
    assert {n: m[n].shape for n in m} == {"en": 1, "addr": 5, "data": 128}
    for enum, bits in ((AttentionState, 2), (VectorState, 3), (KVWriterState, 2)):
        assert enum.as_shape().width == bits and max(s.value for s in enum) < 1 << bits
        assert len({s.value for s in enum}) == len(enum)
