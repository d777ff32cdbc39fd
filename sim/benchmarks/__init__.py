"""Benchmarks run by ``mcf bench NAME``: one module each, discovered by the bench command.

A benchmark module defines ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> dict``; the command prints the dict as JSON (``--json``) or as a table.
Figures are cycles or ratios, never wall-clock seconds, unless the name says so.
"""
