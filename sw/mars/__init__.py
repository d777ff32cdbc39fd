"""MARS: memory-aware replication and scheduling (MCF paper, section 4).

``plan(PlanRequest(...))`` is pure: the same inputs give the same ``Plan`` on every node.
``lower(plan)`` turns a plan into per-node metadata programs (Meta + DMA descriptors + route table).
"""
