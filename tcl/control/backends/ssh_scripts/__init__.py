"""Scripts the ``ssh`` backend runs on a host, with the shim's environment's interpreter.

Each is a standard-library-only program sent as its text: ``python -c TEXT ARGS``
(:mod:`tcl.control.backends.ssh` loads it); ``python FILE ARGS`` runs it the same. Each file's
docstring states its argv, stdin, stdout and exit status.
"""
