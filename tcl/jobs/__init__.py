"""tcl.jobs."""
