"""The fixed-point formats of MCF's datapath: widths, fraction bits and ROM tables.

The one definition the RTL (``mcf.hw``) and the golden model (``mcf.sw.golden.fixed``,
where the arithmetic itself is specified; docs/fixed-point.md) both read, so that hardware
never imports the golden model.  Tables are built once, with float64 maths, and rounded
half up; the hardware stores the same integers in ROM.
"""
from __future__ import annotations

import numpy as np

from .packet import REDUCE_WORD_BITS

# --- format constants ---------------------------------------------------------------------
X_FRAC = 16            # X32 fraction bits
MANT_BITS = 16         # BFP16 mantissa width (signed)
EXP_BITS = 8           # BFP row exponent, weight matrix exponent E_w, KV block exponent (signed)
POS_BITS = 20          # token positions (the instruction set's position fields, the attention unit's ports)
W_BITS = 4             # weight / KV element width (signed)
SCALE_BITS = 16        # weight group scale width (unsigned)
GAIN_BITS = 16         # RMSNorm gain width (signed)
RSQRT_IDX_BITS = 10    # rsqrt LUT index: v normalised to [256, 1024] (even exponent)
RSQRT_FRAC = 14        # rsqrt LUT values Q.14 (<= 2.0)
ROPE_FRAC = 14         # cos/sin table Q.14
SIGMOID_STEP_BITS = 6  # sigmoid LUT step 1/64 over [-8, 8)
SIGMOID_RANGE = 8
P_FRAC = 15            # softmax weight p, and sigmoid / exp2 LUT values, Q.15
S_FRAC = 12            # score fraction bits (log2 units)
EXP_LUT_BITS = 8       # exp2 LUT: 256 entries over one octave
O_FRAC = 12            # fraction bits of o in the (m, l, o) state
#: Largest PV weight w (docs/fixed-point.md section 5.8): 2^31 - 2^15 - 1, so that w splits into two
#: balanced signed 16-bit digits on the MAC array (docs/attention-array.md).  A V from a
#: projection gives w < 2^25; only crafted KV bytes reach it.
W_MAX = (1 << 31) - (1 << 15) - 1
RCP_IDX_BITS = 10      # reciprocal LUT index: l normalised to [512, 1024]
RCP_FRAC = 24          # reciprocal LUT: round(2^24 / i)
KV_A_BITS = 8          # KV scale mantissa A in [128, 255]
RCP7 = 9362            # round(2^16 / 7): amax / 7 without a divider
WORD_BITS = REDUCE_WORD_BITS
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
M_EMPTY = INT32_MIN    # m of a state that has seen no key


def round_half_up(x) -> np.ndarray:
    """Round half up of float64 values to int64 (table and offline-quantiser rounding)."""
    return np.floor(np.asarray(x, dtype=np.float64) + 0.5).astype(np.int64)


# --- tables (ROM contents) -----------------------------------------------------------------
def rsqrt_lut() -> np.ndarray:
    """[i - 256] = round(2^14 / sqrt(i / 1024)) for i in [256, 1024]: 769 entries, <= 32768."""
    i = np.arange(1 << (RSQRT_IDX_BITS - 2), (1 << RSQRT_IDX_BITS) + 1, dtype=np.float64)
    return round_half_up((1 << RSQRT_FRAC) / np.sqrt(i / (1 << RSQRT_IDX_BITS)))


def exp2_lut() -> np.ndarray:
    """[f] = round(2^15 * 2^(-f/256)), f in [0, 255]: 32768 ... 16428."""
    f = np.arange(1 << EXP_LUT_BITS, dtype=np.float64)
    return round_half_up((1 << P_FRAC) * np.exp2(-f / (1 << EXP_LUT_BITS)))


def rcp_lut() -> np.ndarray:
    """[i - 512] = round(2^24 / i) for i in [512, 1024]: 513 entries, 32768 ... 16384."""
    i = np.arange(1 << (RCP_IDX_BITS - 1), (1 << RCP_IDX_BITS) + 1, dtype=np.float64)
    return round_half_up((1 << RCP_FRAC) / i)


def sigmoid_lut() -> np.ndarray:
    """[i + 512] = round(2^15 * sigmoid(i / 64)) for i in [-512, 511]."""
    n = SIGMOID_RANGE << SIGMOID_STEP_BITS
    x = np.arange(-n, n, dtype=np.float64) / (1 << SIGMOID_STEP_BITS)
    return round_half_up((1 << P_FRAC) / (1.0 + np.exp(-x)))


def kv_rcp_lut() -> np.ndarray:
    """[A - 128] = round(2^24 / A) for A in [128, 255] (KV quantiser)."""
    a = np.arange(128, 256, dtype=np.float64)
    return round_half_up((1 << 24) / a)


RSQRT_LUT = rsqrt_lut()
EXP2_LUT = exp2_lut()
RCP_LUT = rcp_lut()
SIGMOID_LUT = sigmoid_lut()
KV_RCP_LUT = kv_rcp_lut()
