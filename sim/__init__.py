"""Simulation infrastructure: the cocotb runner and bus-model helpers, the Amaranth-simulator
stream driver, traffic generators, the SimPy cluster model and the benchmarks (``mcf bench``).
The RTL benches themselves live beside their tests (``tests/hw/...``)."""
