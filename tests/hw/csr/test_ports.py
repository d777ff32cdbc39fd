"""The route-table port (hw/csr/ports.py): widths from the spec, so any route id and any route
entry word pass through it."""
from mcf import spec
from mcf.hw.csr.ports import RouteTablePort
from mcf.spec.packet import ROUTE_ID_BITS
from mcf.spec.regmap import DATA_BITS


def test_widths_come_from_the_spec():
    m = RouteTablePort().members
    assert m["addr"].shape == ROUTE_ID_BITS and 1 << ROUTE_ID_BITS == spec.ROUTE_TABLE_ENTRIES
    assert m["w_data"].shape == m["r_data"].shape == DATA_BITS >= spec.ROUTE_ENTRY.total_bits
    assert RouteTablePort() == RouteTablePort()
