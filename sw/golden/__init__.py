"""Golden model (placeholder docstring, completed below)."""
