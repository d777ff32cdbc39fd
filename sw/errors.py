"""Errors a user can cause.  The ``mcf`` command prints them as one line and exits 2."""
from mcf.spec.bits import SpecError


class UserError(ValueError):
    """Bad input from the user: a parameter out of range, a missing file, an unknown name."""


__all__ = ["UserError", "SpecError"]
