"""The compute units in simulation: random jobs with golden expectations (``jobs``), drivers for
the Amaranth simulator (``drive``), the RTL decoder-layer run (``layer``), cycle costs (``cost``)."""
