"""cocotb benches of the packet framing blocks (hw/packet)."""
