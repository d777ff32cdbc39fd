"""The N-node RTL cluster: N ``Node``s and a model of the 10G switch they meet at, elaborated into
one top (``top.py``, ``switch.py``), run under Verilator with cocotbext-axi bus models as each
node's DDR and PS (``harness.py``)."""
