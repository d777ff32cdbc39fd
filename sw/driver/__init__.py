"""The PS driver of an MCF node: one register interface, several ways to move a word.

    drv = SyncDriver(MmapBackend(0xA000_0000))          # a board without PYNQ
    drv = SyncDriver(PynqBackend(0xA000_0000))          # a board with PYNQ
    drv = Driver(CocotbBackend(axil_master, dut.clk))   # a cocotb bench (await every call)

Backends live in their own modules and import their dependencies (cocotb, pynq) only when
constructed, so nothing else needs them.
"""
from .core import BusError, Descriptor, Driver, DriverError, DriverTimeout, NodeFault, SyncDriver, run_sync
from .mmio import MmapBackend

__all__ = ["BusError", "Descriptor", "Driver", "DriverError", "DriverTimeout", "NodeFault", "SyncDriver",
           "run_sync", "MmapBackend", "CocotbBackend", "PynqBackend"]


def __getattr__(name):
    # The cocotb and PYNQ backends import on first use.
    if name == "CocotbBackend":
        from .cocotb_backend import CocotbBackend
        return CocotbBackend
    if name == "PynqBackend":
        from .pynq_backend import PynqBackend
        return PynqBackend
    raise AttributeError(name)
