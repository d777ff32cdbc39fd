"""Amaranth 0.5's netlist helpers (``amaranth.hdl._nir``) without their per-bit Python calls.

Converting the Qwen node builds ~1.2 M netlist values of ~24 M nets: ``Value(nets)`` checks every
net through a generator and ``Net.ensure`` (a Python call a bit), a new cell's value makes its nets
one ``Net.from_cell`` call a bit, and ``check_comb_cycles`` walks every net recursively (~22 M
Python calls).  That was about half of the conversion's CPU.  The replacements below do the same
work with C-level loops:

- ``Value.__new__`` / ``Value.__getitem__``: the tuple made in one step, every element still
  checked to be a ``Net`` (``AssertionError`` otherwise, as ``Net.ensure``);
- ``Netlist.add_value_cell`` / ``alloc_late_value`` / ``resolve_value``, ``Value.from_const``:
  the same nets, made without a call per bit (the original below the bounds it asserts);
- ``Netlist.check_comb_cycles``: the same depth-first search from the same nets, iterative; when
  it meets a cycle it hands over to Amaranth's own, which raises its ``CombinationalCycle`` with
  the path (so a design with a loop gets the very same error).

The netlist, and so the RTLIL and Verilog, is the same object for object: the output is
byte-identical (``tests/hw/test_fast_netlist.py`` converts designs both ways and compares; a
combinational loop raises the same message).  Installed when ``mcf.hw`` is imported."""
from __future__ import annotations

from itertools import repeat
from operator import itemgetter

from amaranth.hdl import _nir

Net, Value, Netlist = _nir.Net, _nir.Value, _nir.Netlist

_ORIGINAL = {
    (Value, "__new__"): Value.__dict__["__new__"],
    (Value, "__getitem__"): Value.__dict__["__getitem__"],
    (Value, "from_const"): Value.__dict__["from_const"],
    (Netlist, "add_value_cell"): Netlist.__dict__["add_value_cell"],
    (Netlist, "alloc_late_value"): Netlist.__dict__["alloc_late_value"],
    (Netlist, "resolve_value"): Netlist.__dict__["resolve_value"],
    (Netlist, "check_comb_cycles"): Netlist.__dict__["check_comb_cycles"],
}
_original_check_comb_cycles = _ORIGINAL[(Netlist, "check_comb_cycles")]

_tuple_new = tuple.__new__
_tuple_getitem = tuple.__getitem__
_NETS = (Net(0), Net(1))
_first = itemgetter(0)


def _value_new(cls, nets=()):
    if isinstance(nets, Net):
        return _tuple_new(cls, (nets,))
    value = _tuple_new(cls, nets)
    if not all(map(isinstance, value, repeat(Net))):
        bad = next(net for net in value if not isinstance(net, Net))
        raise AssertionError(f"not a Net: {bad!r}")
    return value


def _value_getitem(self, index):
    if isinstance(index, slice):
        return _tuple_new(type(self), _tuple_getitem(self, index))
    return _tuple_getitem(self, index)


def _value_from_const(cls, value, width):
    return _tuple_new(cls, [_NETS[(value >> bit) & 1] for bit in range(width)])


def _add_value_cell(self, width, cell):
    cell_idx = self.add_cell(cell)
    if cell_idx == 0 or width > (1 << 16):      # what Net.from_cell asserts: the original's error
        return Value(Net.from_cell(cell_idx, bit) for bit in range(width))
    base = cell_idx << 16
    return _tuple_new(Value, map(Net, range(base, base + width)))


def _alloc_late_value(self, signal):
    width = len(signal)
    self.last_late_net -= width
    start = self.last_late_net
    value = _tuple_new(Value, map(Net, range(start, start + width)))
    late_to_signal = self.late_to_signal
    for bit, net in enumerate(value):
        late_to_signal[net] = signal, bit
    return value


def _resolve_value(self, value):
    connections = self.connections
    out = []
    append = out.append
    for net in value:
        while net < 0:
            net = connections[net]
        append(net)
    return Value(out)


_BITWISE = ("&", "|", "^")


def _cell_edges(cell):
    """``(shared, per_bit)``: the sources of every output bit of ``cell`` when they are the same
    for each bit (an adder's, a flip-flop's), else the sources of each bit (an assignment list's,
    gathered in one pass over its assignments), else ``(None, None)`` (``comb_edges_to`` per bit)."""
    kind = type(cell)
    if kind is _nir.Operator:
        inputs, op = cell.inputs, cell.operator
        if (len(inputs) == 1 and op != "~") or (len(inputs) == 2 and op not in _BITWISE):
            return tuple(net for value in inputs for net in value), None
    elif kind is _nir.Part:
        return tuple(cell.value) + tuple(cell.offset), None
    elif kind is _nir.Matches:
        return tuple(cell.value), None
    elif kind is _nir.FlipFlop:
        return (cell.clk, cell.arst), None
    elif kind is _nir.AsyncReadPort:
        return tuple(cell.addr), None
    elif kind is _nir.AssignmentList:
        per_bit = [[net] for net in cell.default]
        for assign in cell.assignments:
            cond = assign.cond
            for bit, net in enumerate(assign.value, assign.start):
                per_bit[bit] += (cond, net)
        return None, per_bit
    return None, None


def _check_comb_cycles(self):
    cells, connections = self.cells, self.connections
    checked, busy = set(), set()
    edges = {}              # cell index -> _cell_edges
    done_shared = set()     # cells of shared sources of which one bit is checked: so are its sources

    def sources(net):
        if net < 0:
            return (connections[net],)
        if net < 2:
            return ()
        idx = net >> 16
        entry = edges.get(idx)
        if entry is None:
            entry = edges[idx] = _cell_edges(cells[idx])
        shared, per_bit = entry
        if shared is not None:
            return () if idx in done_shared else shared
        if per_bit is not None:
            return per_bit[net & 0xffff]
        return map(_first, cells[idx].comb_edges_to(net & 0xffff))

    def finish(net):
        busy.remove(net)
        checked.add(net)
        if net >= 2:
            entry = edges.get(net >> 16)
            if entry is not None and entry[0] is not None:
                done_shared.add(net >> 16)

    def has_cycle(root):
        if root in checked:
            return False
        busy.add(root)
        stack = [(root, iter(sources(root)))]
        while stack:
            net, it = stack[-1]
            for src in it:
                if src in checked:
                    continue
                if src in busy:
                    return True
                busy.add(src)
                stack.append((src, iter(sources(src))))
                break
            else:
                stack.pop()
                finish(net)
        return False

    for cell_idx, cell in enumerate(cells):
        for net in cell.output_nets(cell_idx):
            if has_cycle(net):
                return _original_check_comb_cycles(self)    # raises CombinationalCycle with the path
    for value in self.signals.values():
        for net in value:
            if has_cycle(net):
                return _original_check_comb_cycles(self)


_FAST = {
    (Value, "__new__"): staticmethod(_value_new),
    (Value, "__getitem__"): _value_getitem,
    (Value, "from_const"): classmethod(_value_from_const),
    (Netlist, "add_value_cell"): _add_value_cell,
    (Netlist, "alloc_late_value"): _alloc_late_value,
    (Netlist, "resolve_value"): _resolve_value,
    (Netlist, "check_comb_cycles"): _check_comb_cycles,
}


def install() -> None:
    for (cls, name), fn in _FAST.items():
        setattr(cls, name, fn)


def uninstall() -> None:
    for (cls, name), fn in _ORIGINAL.items():
        setattr(cls, name, fn)
