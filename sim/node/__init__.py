"""cocotb benches of the node top (hw/node.py)."""
