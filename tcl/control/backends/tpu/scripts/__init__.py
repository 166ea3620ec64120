"""Scripts the TPU backend has run on a TPU VM, with the shim's environment's interpreter.

Each is a standard-library-only program whose text goes into a GCE script:
``python -c TEXT ARGS`` (:mod:`tcl.control.backends.tpu.bootstrap` loads it); ``python FILE
ARGS`` runs it the same. Each file's docstring states its argv, stdin, stdout and exit status.
"""
