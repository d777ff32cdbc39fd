"""Traffic for the NIC benches: random packets and route tables (``traffic``), the multi-node
plan and its expected deliveries (``cluster_plan``)."""
