"""CRC-32 of IEEE 802.3 (clause 3.2.9) over up to 8 bytes a cycle.

The FCS is the reflected CRC-32 (polynomial 0x04C11DB7, bits taken least significant first,
register preset to all ones, complemented and sent least significant byte first).  A CRC
step over ``n`` bytes is linear over GF(2) in (register, data), so each next-register bit is
the XOR of a fixed set of register and data bits: the sets are found at elaboration by
running the bit-serial definition on symbolic bit vectors (``step_sets``).  The receiver
runs the CRC over the data *and* the received FCS and compares with ``RESIDUE``.
"""
from __future__ import annotations

from functools import lru_cache

from amaranth import Cat, Const, Mux, Value

POLY_REFLECTED = 0xEDB88320
CRC_BITS = 32
PRESET = 0xFFFFFFFF
#: Register value after a correct frame *including* its FCS has gone through the CRC.
RESIDUE = 0xDEBB20E3


def serial_step(crc: int, data: bytes) -> int:
    """The bit-serial definition (the reference the matrices are derived from)."""
    for byte in data:
        for i in range(8):
            feedback = (crc ^ (byte >> i)) & 1
            crc >>= 1
            if feedback:
                crc ^= POLY_REFLECTED
    return crc


@lru_cache(maxsize=None)
def step_sets(nbytes: int) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """For each bit j of the register after ``nbytes`` bytes: (register bits, data bits)
    whose XOR it is."""
    # Symbolic bits: an int mask over 32 register variables then 8 * nbytes data variables.
    crc = [1 << j for j in range(CRC_BITS)]
    for k in range(8 * nbytes):
        d = 1 << (CRC_BITS + k)
        feedback = crc[0] ^ d
        crc = crc[1:] + [0]
        crc = [c ^ feedback if (POLY_REFLECTED >> j) & 1 else c for j, c in enumerate(crc)]
    out = []
    for mask in crc:
        regs = tuple(j for j in range(CRC_BITS) if (mask >> j) & 1)
        data = tuple(k for k in range(8 * nbytes) if (mask >> (CRC_BITS + k)) & 1)
        out.append((regs, data))
    return tuple(out)


def crc_step(crc: Value, data: Value, nbytes: int) -> Value:
    """The register after ``data[0 : 8 * nbytes]`` (byte 0 first) went through the CRC."""
    bits = []
    for regs, dbits in step_sets(nbytes):
        terms = [crc[j] for j in regs] + [data[k] for k in dbits]
        bits.append(Cat(*terms).xor() if terms else Const(0, 1))
    return Cat(*bits)


def crc_step_keep(crc: Value, data: Value, nbytes: Value, lanes: int = 8) -> Value:
    """``crc_step`` over a variable number of bytes (1..lanes; 0 keeps the register)."""
    result = crc
    for n in range(1, lanes + 1):
        result = Mux(nbytes == n, crc_step(crc, data, n), result)
    return result
