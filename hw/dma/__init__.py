"""DMA engines of one node: the ping-pong loader (DDR -> buffers) and the writer (-> DDR)."""
from .loader import DmaLoader
from .writer import DmaWriter

__all__ = ["DmaLoader", "DmaWriter"]
