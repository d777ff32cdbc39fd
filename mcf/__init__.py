"""MCF: long-context LLM inference on a cluster of Kria KR260 FPGA boards.

Sub-packages: ``mcf.spec`` (every format: wire format, register map, node configuration,
topologies, route ids), ``mcf.hw`` (Amaranth RTL), ``mcf.sw`` (golden model and reference
models, MARS, runtime, driver, CLI), ``mcf.sim`` (simulation infrastructure: cocotb runner and
helpers, traffic generators, cluster model, benchmarks), ``mcf.boards`` (KR260 platform and
build flow).  The RTL benches live with their tests (``tests/``).
"""
__version__ = "0.1.0"
