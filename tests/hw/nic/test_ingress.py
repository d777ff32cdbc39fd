"""NIC ingress (hw/nic/ingress.py): construction and the parameters it refuses (the NIC bench in
test_nic.py runs the port: parsing, routing, checks, buffering)."""
import pytest

from mcf.hw.nic.ingress import N_CAUSES, IngressPort
from mcf.spec import ErrorCause


def test_construction():
    ing = IngressPort(64, net_ports=3, depth=64, desc_depth=8, role="local")
    assert ing.n_out == 5 and len(ing.rd) == 5 and len(ing.i.tdata) == 64 and N_CAUSES == len(ErrorCause)


@pytest.mark.parametrize("kw,message", [
    (dict(role="tx"), "role='tx': net, local or result"),
    (dict(depth=100), "buffer depth=100: must be a power of two >= 2"),
    (dict(net_ports=17), "net_ports=17: 1..16"),
])
def test_bad_parameters(kw, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        IngressPort(**{"data_width": 64, "net_ports": 2, **kw})
