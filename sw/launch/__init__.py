"""The multi-board launcher: ``mpirun -H board0,board1,... mcf node ...`` (``sw/commands/node.py``).

``world``  — the ranks and the bounded messages between them (MPI, or threads in one process),
``job``    — the request, the plan and programs every rank derives from it, the per-rank run,
``model``  — the ``model`` backend: a node's lowered program on a model of its DDR.
"""
