"""Simulation: cocotb benches of the RTL and the cluster performance model."""
