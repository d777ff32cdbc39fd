"""The execute unit of a node (EX queue): SPAD and movers around the compute units."""
