"""Software: golden model, MARS planner, runtime, driver and the mcf command."""
