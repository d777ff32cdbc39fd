"""The metadata-driven compute-NIC (MCF section 5); see docs/nic.md."""
