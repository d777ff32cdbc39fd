"""Kria KR260: platform facts, the Vivado block design (PS8 + the MCF node) and the build flow."""
