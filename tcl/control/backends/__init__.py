"""Backends: how control reaches a host's shim and a task's runner (local, ssh)."""

# Modules are imported where used: the ssh backend pulls in asyncssh, which a local-only
# command never needs (import time is part of submit latency).
