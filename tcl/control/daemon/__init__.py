"""``tcl serve``: the workstation's local agent (warm SSH connections, submits, follows)."""
