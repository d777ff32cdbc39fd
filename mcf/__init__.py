"""MCF: long-context LLM inference on a cluster of Kria KR260 FPGA boards.

Sub-packages: ``mcf.spec`` (wire format, register map), ``mcf.hw`` (Amaranth RTL),
``mcf.sw`` (golden model, MARS, runtime, driver, CLI), ``mcf.sim`` (cocotb benches,
cluster model), ``mcf.boards`` (KR260 platform and build flow).
"""
__version__ = "0.1.0"
