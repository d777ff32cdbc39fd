"""The PS driver of an MCF node: one register interface, several ways to move a word.

    drv = SyncDriver(MmapBackend(0xA000_0000))          # a board without PYNQ
    drv = SyncDriver(PynqBackend(0xA000_0000))          # a board with PYNQ
    drv = Driver(CocotbBackend(axil_master, dut.clk))   # a cocotb bench (await every call)

DMA memory (``memory.DmaMemory``: ``PynqMemory``, ``UdmabufMemory``, ``ReservedMemory``,
``HostMemory``) is what the node's DMA window covers; ``Driver.configure(..., memory=m)``,
``load_from`` and ``store_to`` keep the non-coherent HP port's cache upkeep in one place.

Backends live in their own modules and import their dependencies (cocotb, pynq) only when
constructed, so nothing else needs them.
"""
from .core import (BusError, Descriptor, Driver, DriverError, DriverTimeout, NodeFault, PushRefused, SyncDriver,
                   run_sync)
from .memory import DmaMemory, HostMemory, PynqMemory, ReservedMemory, UdmabufMemory
from .mmio import MmapBackend

__all__ = ["BusError", "Descriptor", "Driver", "DriverError", "DriverTimeout", "NodeFault", "PushRefused",
           "SyncDriver",
           "run_sync", "MmapBackend", "CocotbBackend", "PynqBackend",
           "DmaMemory", "HostMemory", "PynqMemory", "ReservedMemory", "UdmabufMemory"]


def __getattr__(name):
    # The cocotb and PYNQ backends import on first use.
    if name == "CocotbBackend":
        from .cocotb_backend import CocotbBackend
        return CocotbBackend
    if name == "PynqBackend":
        from .pynq_backend import PynqBackend
        return PynqBackend
    raise AttributeError(name)
