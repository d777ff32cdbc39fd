"""Per-operation costs of the cluster model: workload arithmetic x hardware profile.

This is the one place where the simulator turns an operation into seconds.  The *workload*
arithmetic (FLOPs, bytes) comes from the model config; every *hardware* number comes from the
MARS hardware profile (``mcf.sw.mars.profile.HardwareProfile``, preset ``profiles/kr260.yaml``),
whose calibration fields the RTL benchmarks overwrite:

==========================  =========================================  ==========================
profile field / property    used for                                   unit
==========================  =========================================  ==========================
``p_node``                  engine FLOP throughput (MACs x 2 x clock     ops/s
                            x ``compute_efficiency``): dense layers
``attention_seconds``       attention time (QK^T and PV): on the array   s
                            path the measured line in the keys a job
                            runs over (``attention_array_job_cycles``
                            + ``_key_cycles`` x keys a job of
                            ``_key_macs`` MACs per key); without that
                            fit, or on the unit, at ``p_attn`` (MACs x
                            2 x clock x ``attention_array_efficiency``
                            or ``attention_efficiency``)
``ddr_Bps``                 DDR streaming (``ddr_bandwidth_Bps`` x       bytes/s
                            ``ddr_efficiency``)
``bw_eff``                  link payload rate per port and direction     bytes/s
                            (``link_bandwidth_bps`` / 8 x
                            ``link_efficiency``)
``link_latency_s``          tau: one hop NIC -> (switch) -> NIC          s
``nic_cycles_per_packet``   NIC parse/decode/route per packet (the NIC   PL cycles
                            is pipelined: it only matters when it is
                            slower than the wire)
``dma_setup_cycles``        fixed cost per engine operation (descriptor  PL cycles
                            fetch, burst set-up)
``pl_clock_hz``             converts cycles to seconds                   Hz
==========================  =========================================  ==========================

The packet payload size is a parameter of the simulation (``packet_payload_bytes``); each packet
carries one ``mcf.spec.HEADER_BYTES`` Meta header.  Headers are added as arithmetic, never as
events.

The FLOP and byte counts are those the MARS planner uses for its cost terms (eq. 6 for attention:
4 L H_q d per query-key pair; 2 ops per weight per token for the dense layers).
"""
from __future__ import annotations

import math

from mcf.spec import HEADER_BYTES

#: Default payload bytes per packet: a 1500-byte Ethernet MTU holds 1024 B of KV plus the 16 B
#: Meta header and encapsulation with room to spare.  A parameter everywhere.
DEFAULT_PACKET_PAYLOAD = 1024
#: Decode message element sizes: fp16 query / hidden vectors, fp32 partial softmax states.
QUERY_ELEM_BYTES = 2
STATE_ELEM_BYTES = 4


# --- workload arithmetic (model only) --------------------------------------------------------
def dense_flops(model, rows: float) -> float:
    """FLOPs of the dense layers (QKV, O, MLP) of all L layers for ``rows`` tokens."""
    return 2.0 * model.params_per_layer * model.num_layers * rows


def attn_flops(model, q_rows: float, keys: float) -> float:
    """FLOPs of QK^T and PV for ``q_rows`` queries against ``keys`` keys, all layers (eq. 6)."""
    return 4.0 * model.num_layers * model.num_heads * model.head_dim * q_rows * keys


def layer_weight_bytes(model) -> float:
    return model.params_per_layer * model.weight_bytes_per_element


def weight_bytes(model) -> float:
    """Bytes of the transformer-layer weights (INT4, scales excluded)."""
    return layer_weight_bytes(model) * model.num_layers


def head_flops(model) -> float:
    """LM head for one token (vocab x hidden GEMV)."""
    return 2.0 * model.vocab_size * model.hidden_size


def head_bytes(model) -> float:
    return model.vocab_size * model.hidden_size * model.weight_bytes_per_element


def kv_bytes(model, tokens: float) -> float:
    return tokens * model.kv_token_bytes


def query_bytes(model) -> float:
    return model.num_heads * model.head_dim * QUERY_ELEM_BYTES


def state_bytes(model) -> float:
    """(m, l, o) partial online-softmax state of one token, all query heads, one layer."""
    return model.num_heads * (model.head_dim + 2) * STATE_ELEM_BYTES


def hidden_bytes(model) -> float:
    return model.hidden_size * QUERY_ELEM_BYTES


# --- hardware: seconds from the profile -------------------------------------------------------
def tile_rows(profile, rows: float) -> float:
    """Query rows the engine actually processes: it works on ``max_tokens`` rows at a time (one
    weight pass), so a partial tile costs a whole one (the MARS planner's rule too).  Prefill
    only; decode's single-token GEMVs are DDR-bound and not rounded."""
    return math.ceil(rows / profile.max_tokens) * profile.max_tokens if rows > 0 else 0



def engine_times(profile, flops: float, ddr_bytes: float, attn_flops: float = 0.0,
                 attn_keys: float | None = None) -> tuple[float, float, float]:
    """(compute s, DDR s, fixed s) of one engine operation; the op takes the max of the first
    two (roofline: the ping-pong loader overlaps DDR streaming with the MAC array) plus the
    fixed set-up cost.  ``flops`` run on the MAC array (``p_node``), ``attn_flops`` on the
    attention path (``profile.attention_seconds``: on the array, the measured line in the keys
    ``attn_keys`` its jobs run over; without them, or on the unit, at ``p_attn``)."""
    return (flops / profile.p_node + float(profile.attention_seconds(attn_flops, attn_keys)),
            ddr_bytes / profile.ddr_Bps, profile.dma_setup_cycles / profile.pl_clock_hz)


def engine_time(profile, flops: float, ddr_bytes: float, attn_flops: float = 0.0,
                attn_keys: float | None = None) -> float:
    c, d, f = engine_times(profile, flops, ddr_bytes, attn_flops, attn_keys)
    return max(c, d) + f


def packets(payload_bytes: float, packet_payload: int = DEFAULT_PACKET_PAYLOAD) -> int:
    return max(1, math.ceil(payload_bytes / packet_payload)) if payload_bytes > 0 else 0


def wire_bytes(payload_bytes: float, packet_payload: int = DEFAULT_PACKET_PAYLOAD) -> float:
    """Bytes a message puts on a link: payload plus one Meta header per packet."""
    return payload_bytes + packets(payload_bytes, packet_payload) * HEADER_BYTES


def serialization_time(profile, payload_bytes: float,
                       packet_payload: int = DEFAULT_PACKET_PAYLOAD) -> float:
    """Time a message occupies each link of its path: wire bytes / BW_eff, or the NIC's
    per-packet processing if that is slower (the NIC is pipelined, so not both)."""
    n = packets(payload_bytes, packet_payload)
    wire = wire_bytes(payload_bytes, packet_payload) / profile.bw_eff
    nic = n * profile.nic_cycles_per_packet / profile.pl_clock_hz
    return max(wire, nic)
