"""What a host keeps beside its code cache (``<code-cache>/…``), named once for both agents:
the runner writes there (``tcl.runner.main``), the shim keeps it bounded (``tcl.shim``)."""

COMPILE_CACHE = "jax"  # JAX's persistent compilation cache of the host's jobs
PROJECT_ENVS = "envs"  # the jobs' uv project environments (tcl.runner.projectenv)
