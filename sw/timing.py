"""Logic depth of a synthesized netlist: how many LUT levels every register-to-register path has.

``mcf synth`` runs Yosys (``synth_xilinx -family xcup``), writes the mapped netlist as JSON and
:func:`analyze` walks it.  Start points are the outputs of clocked cells (flip-flops, block RAM and
UltraRAM, registered DSP48E2 outputs, shift registers) and the block's input ports; end points are
the inputs of clocked cells and the output ports.  Between them each combinational cell adds its
cost in *levels*:

* a LUT (LUT1..LUT6, INV) is one level;
* a carry chain is one level where the path enters it (at ``S``/``DI``; the LUT that feeds it is a
  level of its own) plus ``CARRY4_HOP`` for every further CARRY4 it ripples through along ``CI``
  (Yosys maps to CARRY4; the part's CARRY8 is two of them: 64 bits of ripple cost one more level);
* a wide-function mux (MUXF7/F8) is a quarter of a level;
* the asynchronous read of a LUT RAM (address to data) is a LUT;
* a block RAM / UltraRAM read without its output register launches ``BRAM_START_LEVELS`` late;
* a DSP48E2 counts what its own registers leave out: ``DSP_HALF_LEVELS`` for the multiplier or the
  ALU half that is not registered on the path's side, both for a DSP without any register.

The depth of a path is the sum of its costs; the budget for the node's clock is ``BUDGET_LEVELS``.
``docs/timing.md`` gives the facts behind these numbers.  An estimate from a netlist without
placement: Vivado maps differently (a level or so either way) and its routing decides in the end.
"""
from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass, field

from mcf.spec.node import PL_CLOCK_HZ

# --- the timing model (docs/timing.md) ------------------------------------------------------------
#: One level: a LUT and the net after it on the K26 (xck26 -2LV: the -1 grade's speed), ns.
LEVEL_NS = 0.40
#: Flip-flop clock-to-out + setup + clock uncertainty and skew, ns.
OVERHEAD_NS = 0.45
#: Levels that fit one period of the node's PL clock.
BUDGET_LEVELS = int((1e9 / PL_CLOCK_HZ - OVERHEAD_NS) / LEVEL_NS)
#: A block RAM / UltraRAM read without its output register: clock-to-out ~1.5 ns instead of a
#: flip-flop's ~0.2 ns.
BRAM_START_LEVELS = 3.0
#: A DSP48E2's multiplier (or its ALU + output) without the pipeline register between them.
DSP_HALF_LEVELS = 3.0
#: Its pre-adder (AD = A + D, 27 bits) without the AD register, in front of the multiplier (round 33: the
#: matrix unit's accumulator slices): half the multiplier's count.
DSP_PREADD_LEVELS = DSP_HALF_LEVELS / 2
#: Each further CARRY4 of a ripple (CI -> CO): 4 bits of carry.
CARRY4_HOP = 1 / 16
MUXF_LEVELS = 0.25

LUTS = {f"LUT{i}" for i in range(1, 7)} | {"INV", "LUT6_2"}
MUXF = {"MUXF7", "MUXF8", "MUXF9"}
CARRY = {"CARRY4", "CARRY8"}
FLOPS = {"FDRE", "FDSE", "FDCE", "FDPE", "FDRE_1", "FDSE_1", "FDCE_1", "FDPE_1", "LDCE", "LDPE"}
BRAMS = {"RAMB18E2", "RAMB36E2", "URAM288", "URAM288_BASE"}
SRLS = {"SRL16E", "SRLC16E", "SRLC32E"}
IGNORED = {"BUFG", "BUFGCE", "BUFG_PS", "IBUF", "OBUF", "VCC", "GND", "$scopeinfo"}
CLOCK_PINS = {"C", "CLK", "G", "WCLK", "CLKARDCLK", "CLKBWRCLK"}
#: LUT RAMs: (read address pin prefix, data output) pairs; every input is also a (write) end point.
LUTRAM_READS = {
    "RAM32M16": [(f"ADDR{c}", f"DO{c}") for c in "ABCDEFGH"],
    "RAM64M8": [(f"ADDR{c}", f"DO{c}") for c in "ABCDEFGH"],
    "RAM32M": [(f"ADDR{c}", f"DO{c}") for c in "ABCD"],
    "RAM64M": [(f"ADDR{c}", f"DO{c}") for c in "ABCD"],
    **{t: [("A", "SPO"), ("DPRA", "DPO")] for t in ("RAM32X1D", "RAM64X1D", "RAM128X1D", "RAM256X1D")},
    **{t: [("A", "O")] for t in ("RAM32X1S", "RAM64X1S", "RAM128X1S", "RAM256X1S", "RAM512X1S")},
}


class NetlistError(ValueError):
    """The netlist holds something the analysis does not know how to time."""


@dataclass(frozen=True)
class Path:
    """The worst path between two groups of registers (buses, memories)."""
    levels: float                 # depth in levels (the budget's unit)
    luts: int                     # LUTs (and LUT-RAM reads) on it
    carries: int                  # carry chains entered
    start: str                    # readable start point (a register, memory, DSP or port)
    end: str                      # readable end point

    def as_dict(self) -> dict:
        return {"levels": round(self.levels, 3), "luts": self.luts, "carries": self.carries,
                "start": self.start, "end": self.end}


@dataclass
class Depth:
    """The result of :func:`analyze`."""
    max_levels: float
    paths: list                   # the worst paths, one per (start, end) group pair, deepest first
    endpoints: int                # timed end points (bits)
    histogram: dict = field(default_factory=dict)   # ceil(levels) -> end points
    by_unit: dict = field(default_factory=dict)     # source file / memory -> deepest path ending there
    #: Per port bit of the top: "out" the levels at which it is ready (None: not timed), "in" the
    #: levels from it to the deepest register it reaches (None: none) -- a parent's view of it.
    ports: dict = field(default_factory=dict)

    def over(self, budget: float = BUDGET_LEVELS) -> list:
        return [p for p in self.paths if p.levels > budget + 1e-9]

    def as_dict(self, budget: float = BUDGET_LEVELS) -> dict:
        return {"max_levels": round(self.max_levels, 3), "budget_levels": budget,
                "clock_mhz": PL_CLOCK_HZ / 1e6, "endpoints": self.endpoints,
                "endpoints_over_budget": sum(n for d, n in self.histogram.items() if d > budget),
                "histogram": {str(k): v for k, v in sorted(self.histogram.items())},
                "by_unit": {k: round(v, 3) for k, v in sorted(self.by_unit.items(), key=lambda kv: -kv[1])},
                "worst_paths": [p.as_dict() for p in self.paths]}


def _param(params: dict, name: str, default: int = 0) -> int:
    """A cell parameter as an int (Yosys writes binary strings, quoted strings or ints)."""
    v = params.get(name)
    if v is None:
        return default
    if isinstance(v, int):
        return v
    s = str(v).strip()
    if s and set(s) <= set("01xz"):
        return int(s.replace("x", "0").replace("z", "0"), 2)
    s = s.strip('"').upper()
    return {"TRUE": 1, "FALSE": 0}.get(s, default)


def _top(netlist: dict, top: str | None) -> dict:
    mods = netlist.get("modules", {})
    if top:
        for key in (top, f"\\{top}"):
            if key in mods:
                return mods[key]
        raise NetlistError(f"module {top!r} is not in the netlist")
    tops = [m for m in mods.values() if _param(m.get("attributes", {}), "top")]
    if len(tops) == 1:
        return tops[0]
    if len(mods) == 1:
        return next(iter(mods.values()))
    raise NetlistError("the netlist has no single top module: name it")


_INDEX = re.compile(r"\[\d+\]$")
_MEM_INDEX = re.compile(r"(\.\d+)+$")


def _source(cell: dict) -> str | None:
    """``hw/nic/reduce.py:54`` from a cell's ``src`` attribute (the first design location)."""
    for loc in str(cell.get("attributes", {}).get("src", "")).split("|"):
        m = re.search(r"((?:hw|sim|sw|spec)/[\w/]+\.py:\d+)", loc)
        if m:
            return m.group(1)
    return None


class _Names:
    """Readable names of net bits: named wires beat Yosys's ``$`` names."""

    def __init__(self, module: dict):
        self.best: dict[int, str] = {}
        score: dict[int, tuple] = {}
        for name, net in module.get("netnames", {}).items():
            hidden = bool(net.get("hide_name", 0)) or "$" in name
            if hidden:
                continue
            bits = net["bits"]
            for i, b in enumerate(bits):
                if isinstance(b, int):
                    label = name if len(bits) == 1 else f"{name}[{i}]"
                    key = (len(name), name)
                    if b not in score or key < score[b]:
                        score[b], self.best[b] = key, label

    def get(self, bit: int) -> str | None:
        return self.best.get(bit)


def _group(label: str) -> str:
    """The bus or memory a point belongs to (``x[3]`` -> ``x``, ``mem.0.1:DOUT`` -> ``mem:DOUT``)."""
    name, _, pin = label.partition(":")
    name = _MEM_INDEX.sub("", _INDEX.sub("", name))
    return f"{name}:{_INDEX.sub('', pin)}" if pin else name


def _lut_arcs(ctype: str, params: dict, outs: list, ins: list):
    """A LUT's arcs: (output pin, the input pins its function reads).  A timer takes a LUT's arcs from
    its function (its INIT): an input that no output value depends on has no arc to it -- a LUT6_2's
    O5 reads I0 .. I4 of INIT's low half only (``mcf.hw.lut.add3``: bit i's O5, the carry-save carry,
    does not depend on its I3, the bit below's, so the carries do not ripple through the LUTs).
    Without an INIT (or one that cannot be read): every input."""
    init = params.get("INIT")
    try:
        init = int(init, 2) if isinstance(init, str) else int(init)
    except (TypeError, ValueError):
        init = None
    pins_in = sorted((p for p in ins if re.fullmatch(r"I\d", p)), key=lambda p: int(p[1:]))
    if init is None or len(pins_in) != len(ins) or ctype == "INV":
        return [(o, ins) for o in outs]
    arcs = []
    for o in outs:
        n = 5 if (ctype == "LUT6_2" and o == "O5") else len(pins_in)
        size = 1 << n
        used = [p for p in pins_in if int(p[1:]) < n
                and any(((init >> a) ^ (init >> (a ^ (1 << int(p[1:]))))) & 1 for a in range(size))]
        arcs.append((o, used))
    return arcs


class _Graph:
    def __init__(self):
        self.arcs: dict[int, list] = {}    # out bit -> [(in bit, cost, kind)]
        self.start: dict[int, tuple] = {}  # bit -> (levels, label)
        self.ends: list[tuple] = []        # (bit, extra levels, label)

    def arc(self, outs, ins, cost, kind):
        ins = [b for b in ins if isinstance(b, int)]
        for o in outs:
            if isinstance(o, int):
                self.arcs.setdefault(o, []).extend((i, cost, kind) for i in ins)

    def starts(self, bits, levels, label):
        for i, b in enumerate(bits):
            if isinstance(b, int):
                self.start[b] = (levels, label(i, b))

    def end(self, bits, extra, label):
        for i, b in enumerate(bits):
            if isinstance(b, int):
                self.ends.append((b, extra, label(i, b)))


def _build(mod: dict, names: _Names, boundaries=frozenset()) -> _Graph:
    g = _Graph()
    for cname, cell in mod.get("cells", {}).items():
        ctype = cell["type"].lstrip("\\")
        if ctype in IGNORED:
            continue
        if ctype in boundaries:
            # A part synthesized on its own (``mcf synth --method blocks``): its outputs start
            # paths at the levels its own run found at those ports, its inputs end them with the
            # levels from those ports to the part's registers (``Depth.ports``).
            known = boundaries[ctype] or {}
            conn = cell.get("connections", {})
            for pin, d in cell.get("port_directions", {}).items():
                side = known.get("out" if d == "output" else "in", {}).get(pin, [])
                for i, b in enumerate(conn.get(pin, [])):
                    lv = side[i] if i < len(side) and side[i] is not None else 0.0
                    lab = (lambda i, b, c=cname, p=pin: f"{c}:{p}")
                    if d == "output":
                        g.starts([b], lv, lab)
                    else:
                        g.end([b], lv, lab)
            continue
        params = cell.get("parameters", {})
        conn = cell.get("connections", {})
        dirs = cell.get("port_directions", {})
        ins = [p for p, d in dirs.items() if d == "input" and p not in CLOCK_PINS]
        outs = [p for p, d in dirs.items() if d == "output"]

        def pins(ps):
            return [b for p in ps for b in conn.get(p, [])]

        def label_at(suffix):
            return lambda i, b, s=suffix: f"{cname}:{s}[{i}]" if len(conn.get(s, [])) > 1 else f"{cname}:{s}"

        if ctype in LUTS:
            for out, used in _lut_arcs(ctype, params, outs, ins):
                g.arc(pins([out]), pins(used), 1.0, "lut")
        elif ctype in MUXF:
            g.arc(pins(outs), pins(ins), MUXF_LEVELS, "mux")
        elif ctype in CARRY:
            hop = CARRY4_HOP * (2 if ctype == "CARRY8" else 1)
            g.arc(pins(["O", "CO"]), pins(["S", "DI", "CYINIT"]), 1.0, "carry")
            g.arc(pins(["O", "CO"]), pins(["CI", "CI_TOP"]), hop, "hop")
        elif ctype in LUTRAM_READS:
            mem = _MEM_INDEX.sub("", cname)
            for prefix, out in LUTRAM_READS[ctype]:
                addr = [p for p in ins if re.fullmatch(rf"{prefix}\d*", p)]
                g.arc(conn.get(out, []), pins(addr), 1.0, "lut")
            g.end(pins(ins), 0.0, lambda i, b: f"{mem}:write")
        elif ctype in FLOPS or ctype in SRLS:
            src = _source(cell)
            q = pins(outs)

            def reg_label(i, b, q=q, src=src):
                qb = q[0] if q else b
                name = names.get(qb) if isinstance(qb, int) else None
                return name or (f"reg@{src}" if src else f"reg {cname}")
            g.end(pins(ins), 0.0, reg_label)
            g.starts(q, 0.0, reg_label)
            if ctype in SRLS:          # a variable tap: address -> Q
                g.arc(q, pins([p for p in ins if p.startswith("A")]), 1.0, "lut")
        elif ctype in BRAMS:
            mem = _MEM_INDEX.sub("", cname)
            if ctype.startswith("URAM"):
                reg = {"A": _param(params, "OREG_A"), "B": _param(params, "OREG_B")}
            else:
                reg = {"A": _param(params, "DOA_REG"), "B": _param(params, "DOB_REG")}
            g.end(pins(ins), 0.0, lambda i, b: f"{mem}:in")
            for p in outs:
                side = "B" if re.search(r"DOUTB|DOUT_B|_B$|B$", p) else "A"
                g.starts(conn.get(p, []), 0.0 if reg[side] else BRAM_START_LEVELS,
                         lambda i, b, side=side: f"{mem}:read{side}")
        elif ctype == "DSP48E2":
            _dsp(g, cname, cell, pins, ins, outs)
        else:
            raise NetlistError(f"cell {cname}: type {ctype} is not in the timing model")

    for pname, port in mod.get("ports", {}).items():
        lab = (lambda i, b, n=pname, w=len(port["bits"]): f"port {n}[{i}]" if w > 1 else f"port {n}")
        if port["direction"] == "input":
            g.starts([b for b in port["bits"] if isinstance(b, int) and b not in g.start], 0.0, lab)
        else:
            g.end(port["bits"], 0.0, lab)
    return g


def _dsp(g: _Graph, cname: str, cell: dict, pins, ins, outs) -> None:
    """A DSP48E2 by its registers: inputs (A/B/C/D), M (after the multiplier), P (after the ALU)."""
    params = cell.get("parameters", {})
    src = _source(cell)
    label = (lambda i, b: f"dsp@{src}") if src else (lambda i, b: f"dsp {cname}")
    mreg, preg = _param(params, "MREG"), _param(params, "PREG")
    reg_of = {"A": _param(params, "AREG"), "B": _param(params, "BREG"), "C": _param(params, "CREG"),
              "D": _param(params, "DREG")}
    product = [p for p in ("A", "B", "D", "ACIN", "BCIN") if p in ins]
    alu = [p for p in ("C", "PCIN", "CARRYIN", "CARRYCASCIN", "MULTSIGNIN") if p in ins]
    control = [p for p in ins if p not in product and p not in alu]
    # Levels from each input pin to the P register (or to the P pins if there is none).
    to_p = {}
    # (an unregistered pre-adder: the A / D pins that are not registered go through it too)
    pre = (str(params.get("AMULTSEL", "")).strip().strip('"').strip().upper() == "AD" and _param(params, "ADREG", 1) == 0)
    for p in product:
        registered = reg_of.get(p[0], 0) >= 1
        to_p[p] = 0.0 if registered else ((DSP_HALF_LEVELS if mreg else 2 * DSP_HALF_LEVELS)
                                          + (DSP_PREADD_LEVELS if pre and p in ("A", "D") else 0.0))
    for p in alu:
        to_p[p] = 0.0 if (p == "C" and reg_of["C"]) else DSP_HALF_LEVELS / 2
    p_out = [p for p in outs if p in ("P", "PCOUT", "CARRYOUT", "CARRYCASCOUT", "MULTSIGNOUT",
                                      "PATTERNDETECT", "PATTERNBDETECT", "OVERFLOW", "UNDERFLOW", "XOROUT")]
    casc = [p for p in outs if p in ("ACOUT", "BCOUT")]
    if preg:
        for p, extra in to_p.items():
            g.end(pins([p]), extra, label)
        g.starts(pins(p_out), 0.0, label)
    else:
        # No P register: what is registered inside launches the rest of the way to the P pins;
        # what is not runs through to them.
        launch = None
        for p in product:
            if mreg:
                g.end(pins([p]), to_p[p] - DSP_HALF_LEVELS, label)
                launch = DSP_HALF_LEVELS
            elif to_p[p] == 0:
                g.end(pins([p]), 0.0, label)
                launch = 2 * DSP_HALF_LEVELS
            else:
                g.arc(pins(p_out), pins([p]), to_p[p], "dsp")
        for p in alu:
            if to_p[p] == 0:
                g.end(pins([p]), 0.0, label)
                launch = max(launch or 0.0, DSP_HALF_LEVELS / 2)
            else:
                g.arc(pins(p_out), pins([p]), to_p[p], "dsp")
        if launch is not None:
            g.starts(pins(p_out), launch, label)
    g.end(pins(control), 0.0, label)
    g.arc(pins(casc), pins([p for p in ("A", "B", "ACIN", "BCIN") if p in ins]), 0.0, "dsp")


def analyze(netlist: dict, top: str | None = None, worst: int = 12, boundaries=None) -> Depth:
    """Depth of every timed path of ``top`` (a ``write_json`` netlist after ``synth_xilinx``).
    ``boundaries``: cell type -> the ``Depth.ports`` of that part's own run (or None: its pins at
    0 levels); such cells (parts synthesized separately, black boxes here) join their paths to
    the parent's at their pins.  A path that enters a part and leaves it again without a register
    is the one thing this misses (each half is timed, not their sum)."""
    mod = _top(netlist, top)
    names = _Names(mod)
    bounds = {k.lstrip("\\"): v for k, v in (boundaries.items() if isinstance(boundaries, dict)
                                              else ((b, None) for b in boundaries or ()))}
    g = _build(mod, names, bounds)
    arrival, pred = _arrivals(g.arcs, g.start)
    pairs: dict[tuple, tuple] = {}
    hist: dict[int, int] = {}
    by_unit: dict[str, float] = {}
    timed = 0
    for bit, extra, end_label in g.ends:
        if bit not in arrival:
            continue                   # a constant, or nothing timed drives it
        timed += 1
        levels = arrival[bit] + extra
        bucket = math.ceil(levels - 1e-9)
        hist[bucket] = hist.get(bucket, 0) + 1
        unit = _unit(end_label)
        by_unit[unit] = max(by_unit.get(unit, 0.0), levels)
        root = _root(bit, pred)
        start_label = g.start.get(root, (0.0, f"<net {root}>"))[1]
        key = (_group(start_label), _group(end_label))
        if key not in pairs or levels > pairs[key][0]:
            pairs[key] = (levels, bit, start_label, end_label)
    best = heapq.nlargest(worst, pairs.values(), key=lambda t: t[0])
    paths = [_trace(levels, bit, s, e, pred) for levels, bit, s, e in best]
    return Depth(max((lv for lv, *_ in pairs.values()), default=0.0), paths, timed, hist, by_unit,
                 _port_timing(mod, g, arrival))


def _port_timing(mod: dict, g: _Graph, arrival: dict) -> dict:
    """``Depth.ports``: arrival at each output port bit, levels still to go from each input bit."""
    fan: dict[int, list] = {}
    for o, ins in g.arcs.items():
        for i, cost, _ in ins:
            fan.setdefault(i, []).append((o, cost))
    end_extra: dict[int, float] = {}
    for b, extra, _ in g.ends:
        end_extra[b] = max(end_extra.get(b, extra), extra)
    req: dict[int, float | None] = {}
    busy: set = set()

    def required(root: int):
        if root in req:
            return req[root]
        stack = [(root, 0)]
        busy.add(root)
        while stack:
            bit, i = stack.pop()
            outs = fan.get(bit, [])
            if i < len(outs):
                stack.append((bit, i + 1))
                nxt = outs[i][0]
                if nxt in busy:
                    raise NetlistError(f"combinational loop through net {nxt}")
                if nxt not in req:
                    busy.add(nxt)
                    stack.append((nxt, 0))
                continue
            busy.discard(bit)
            best = end_extra.get(bit)
            for o, cost in outs:
                r = req.get(o)
                if r is not None and (best is None or cost + r > best):
                    best = cost + r
            req[bit] = best
        return req[root]

    out: dict = {"in": {}, "out": {}}
    for pname, port in mod.get("ports", {}).items():
        bits = port["bits"]
        if port["direction"] == "input":
            out["in"][pname] = [required(b) if isinstance(b, int) else None for b in bits]
        else:
            out["out"][pname] = [arrival.get(b) if isinstance(b, int) else None for b in bits]
    return out


def _unit(label: str) -> str:
    """What a path's end belongs to: the instance that holds the register / memory (its source file
    for an unnamed register or a DSP), ``ports`` for an output port."""
    m = re.search(r"@((?:hw|sim|sw|spec)/[\w/]+\.py)", label)
    if m:
        return m.group(1)
    if label.startswith("port "):
        return "ports"
    name = _group(label).split(":")[0]
    return name.rsplit(".", 1)[0] if "." in name else "top"


def _arrivals(arcs: dict, start: dict):
    """Longest arrival (levels) at every bit reachable from a start point, with the arc that gave
    it; raises on a combinational loop."""
    arrival: dict[int, float] = {b: lv for b, (lv, _) in start.items()}
    pred: dict[int, tuple] = {}
    state: dict[int, int] = {}        # 1 = on the stack, 2 = done
    for root in arcs:
        if state.get(root) == 2:
            continue
        stack = [(root, 0)]
        while stack:
            bit, i = stack.pop()
            if bit in start or bit not in arcs:
                state[bit] = 2
                continue
            if i == 0:
                if state.get(bit) == 2:
                    continue
                state[bit] = 1
            ins = arcs[bit]
            if i < len(ins):
                stack.append((bit, i + 1))
                src = ins[i][0]
                s = state.get(src)
                if s == 1:
                    raise NetlistError(f"combinational loop through net {src}")
                if s is None:
                    stack.append((src, 0))
                continue
            best, arg = None, None
            for src, cost, kind in ins:
                a = arrival.get(src)
                if a is not None and (best is None or a + cost > best):
                    best, arg = a + cost, (src, kind)
            if best is not None:
                arrival[bit], pred[bit] = best, arg
            state[bit] = 2
    return arrival, pred


def _root(bit: int, pred: dict) -> int:
    while bit in pred:
        bit = pred[bit][0]
    return bit


def _trace(levels, bit, start_label, end_label, pred) -> Path:
    luts = carries = 0
    while bit in pred:
        bit, kind = pred[bit]
        luts += kind == "lut"
        carries += kind == "carry"
    return Path(levels, luts, carries, start_label, end_label)


# --- resources per unit --------------------------------------------------------------------------
#: LUTs taken by each distributed-RAM / shift-register primitive (UltraScale+ library guide).
LUTRAM_LUTS = {"RAM32M16": 8, "RAM64M8": 8, "RAM32M": 4, "RAM64M": 4, "RAM32X1D": 2, "RAM64X1D": 2,
               "RAM128X1D": 4, "RAM256X1D": 8, "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2,
               "RAM256X1S": 4, "RAM512X1S": 8, "SRL16E": 1, "SRLC32E": 1, "SRLC16E": 1}
RESOURCE_KEYS = ("LUT", "LUT_logic", "LUT_memory", "FF", "DSP", "BRAM36", "URAM")
_FLATTEN = re.compile(r"^\$flatten\\?([\w.$]+?)\.\$")


def _cell_unit(cname: str, ctype: str, cell: dict, names: _Names) -> str:
    """The unit a clocked cell (or memory, DSP, part) belongs to, named as ``_unit`` names the
    end points of ``analyze``: the instance holding the register / memory, else its source file."""
    conn = cell.get("connections", {})
    if ctype in FLOPS or ctype in SRLS:
        q = [b for p, d in cell.get("port_directions", {}).items() if d == "output" for b in conn.get(p, [])]
        name = names.get(q[0]) if q and isinstance(q[0], int) else None
        src = _source(cell)
        return _unit(name or (f"reg@{src}" if src else f"reg {cname}"))
    if ctype in LUTRAM_READS or ctype in BRAMS:
        return _unit(f"{_MEM_INDEX.sub('', cname)}:in")
    if ctype == "DSP48E2":      # the flattened instance if Yosys kept it in the name, else the file
        m = _FLATTEN.match(cname)
        if m:
            return m.group(1)
        src = _source(cell)
        return _unit(f"dsp@{src}" if src else f"dsp {cname}")
    return cname                # a part mapped on its own (a black box here): its instance


def resources(netlist: dict, top: str | None = None, boundaries=()) -> dict:
    """Resources of ``top`` (a ``write_json`` netlist after ``synth_xilinx``) per unit, the units
    of ``analyze``'s ``by_unit``: unit -> {LUT, LUT_logic, LUT_memory, FF, DSP, BRAM36, URAM}.

    Clocked cells (flip-flops, shift registers, LUT RAM, block RAM, UltraRAM, DSPs) belong to the
    unit that holds them.  A combinational cell (LUT, carry chain, wide mux) has no name after
    LUT mapping: it belongs to the unit of the nearest clocked cell (or output port: ``ports``, or
    black box ``boundaries``: its instance) its outputs reach, counted in cells on the way; a cell
    as near to several units is shared equally among them (so the units add up to the block's
    totals; shares are fractions).  Logic that reaches no end point is ``unconnected``."""
    mod = _top(netlist, top)
    names = _Names(mod)
    bounds = {b.lstrip("\\") for b in boundaries or ()}
    out: dict[str, dict] = {}

    def add(unit, key, n):
        r = out.setdefault(unit, dict.fromkeys(RESOURCE_KEYS, 0))
        r[key] += n
        if key in ("LUT_logic", "LUT_memory"):
            r["LUT"] += n

    comb: dict[str, tuple] = {}          # combinational cell -> (LUT count, its output bits)
    sink_units: dict[int, set] = {}      # bit -> units of the clocked cells / ports it enters
    readers: dict[int, list] = {}        # bit -> combinational cells it enters
    for cname, cell in mod.get("cells", {}).items():
        ctype = cell["type"].lstrip("\\")
        if ctype in IGNORED:
            continue
        conn = cell.get("connections", {})
        dirs = cell.get("port_directions", {})
        ins = [b for p, d in dirs.items() if d != "output" and p not in CLOCK_PINS
               for b in conn.get(p, []) if isinstance(b, int)]
        if ctype in LUTS or ctype in MUXF or ctype in CARRY:
            outs = [b for p, d in dirs.items() if d == "output" for b in conn.get(p, []) if isinstance(b, int)]
            comb[cname] = (1 if ctype in LUTS else 0, outs)
            for b in ins:
                readers.setdefault(b, []).append(cname)
            continue
        if not (ctype in FLOPS or ctype in SRLS or ctype in LUTRAM_READS or ctype in BRAMS
                or ctype == "DSP48E2" or ctype in bounds):
            raise NetlistError(f"cell {cname}: type {ctype} is not in the resource model")
        unit = _cell_unit(cname, ctype, cell, names)
        if ctype in FLOPS:
            add(unit, "FF", 1)
        elif ctype in SRLS or ctype in LUTRAM_READS:
            add(unit, "LUT_memory", LUTRAM_LUTS.get(ctype, 1))
        elif ctype in BRAMS:
            if ctype.startswith("URAM"):
                add(unit, "URAM", 1)
            else:
                add(unit, "BRAM36", 1 if ctype == "RAMB36E2" else 0.5)
        elif ctype == "DSP48E2":
            add(unit, "DSP", 1)
        else:
            out.setdefault(unit, dict.fromkeys(RESOURCE_KEYS, 0))
        for b in ins:
            sink_units.setdefault(b, set()).add(unit)
    for port in mod.get("ports", {}).values():
        if port["direction"] != "input":
            for b in port["bits"]:
                if isinstance(b, int):
                    sink_units.setdefault(b, set()).add("ports")
    # Breadth first from the end points back through the combinational cells: each cell takes
    # the units of the nearest end points its outputs reach.
    driver_of: dict[int, str] = {b: c for c, (_, outs) in comb.items() for b in outs}
    owner: dict[str, frozenset] = {}
    frontier: dict[str, set] = {}
    for b, units in sink_units.items():
        c = driver_of.get(b)
        if c is not None:
            frontier.setdefault(c, set()).update(units)
    while frontier:
        for c, units in frontier.items():
            owner[c] = frozenset(units)
        nxt: dict[str, set] = {}
        # the cells feeding this level's cells, not yet owned, take the union of their units
        for c, units in frontier.items():
            cell = mod["cells"][c]
            dirs = cell.get("port_directions", {})
            for p, d in dirs.items():
                if d == "output":
                    continue
                for b in cell.get("connections", {}).get(p, []):
                    if not isinstance(b, int):
                        continue
                    d_ = driver_of.get(b)
                    if d_ is not None and d_ not in owner:
                        nxt.setdefault(d_, set()).update(owner[c])
        frontier = nxt
    for c, (luts, _) in comb.items():
        if not luts:
            continue
        units = owner.get(c) or frozenset({"unconnected"})
        for u in units:
            add(u, "LUT_logic", luts / len(units))
    return {u: {k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()}
            for u, r in sorted(out.items(), key=lambda kv: (-kv[1]["LUT"], kv[0]))}


def roll_up(by_unit: dict, depth: int = 1) -> dict:
    """``resources`` summed over the first ``depth`` parts of each unit's instance path
    (``loader0.descq`` -> ``loader0``; a source file or ``ports`` stays as it is)."""
    out: dict[str, dict] = {}
    for unit, r in by_unit.items():
        key = unit if "/" in unit or unit in ("ports", "top", "unconnected") else ".".join(unit.split(".")[:depth])
        acc = out.setdefault(key, dict.fromkeys(RESOURCE_KEYS, 0))
        for k in RESOURCE_KEYS:
            acc[k] += r[k]
    return {u: {k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()}
            for u, r in sorted(out.items(), key=lambda kv: (-kv[1]["LUT"], kv[0]))}
