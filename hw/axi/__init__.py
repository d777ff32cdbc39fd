"""AXI4 and AXI4-Lite memory-mapped interfaces (signatures only; no logic)."""
