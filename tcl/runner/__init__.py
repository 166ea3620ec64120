"""tcl.runner."""
