"""tcl.cli."""
