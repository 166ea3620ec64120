"""Scripts the SLURM backend runs on a cluster's login node, with the cluster's interpreter.

Each is a standard-library-only program (tcl is not installed there), sent as its text:
``python -c TEXT ARGS`` (:mod:`tcl.control.backends.slurm.remote` loads it); ``python FILE ARGS``
runs it the same. Each file's docstring states its argv, stdin and stdout.
"""
