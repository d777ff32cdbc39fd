"""DMA engines of one node: the ping-pong loader (DDR -> buffers) and the writer (-> DDR)."""
from .loader import DmaLoader
from .writer import DmaWriter
from .engine import ControlAndDma, DmaEngine

__all__ = ["ControlAndDma", "DmaEngine", "DmaLoader", "DmaWriter"]
