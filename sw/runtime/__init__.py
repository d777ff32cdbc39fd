"""The PS runtime: packs a checkpoint into node DDR, writes programs and registers through the driver, runs prefill and decode (``mcf run``)."""
