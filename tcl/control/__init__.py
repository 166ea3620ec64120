"""tcl.control."""
