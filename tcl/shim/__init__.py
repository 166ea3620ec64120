"""tcl.shim."""
