"""Subcommands of ``mcf``: one module each, discovered by ``mcf.sw.cli``."""
