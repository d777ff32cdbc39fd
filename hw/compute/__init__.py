"""Compute engine of one node (MCF section 5): matrix unit, vector unit, attention unit,
KV block writer and the local replica directory, bit-exact with ``mcf.sw.golden.fixed``."""
