"""Errors of the pieces both agents use (:mod:`tcl.clusterfs_node`).

The shim translates them into its own tree where they reach its API (``MountFailed`` there is
an ``ExecutorError``, answered 424); a SLURM node's runner reports them as they are.
"""

from __future__ import annotations


class MountFailed(Exception):
    """The cluster's filesystem could not be mounted (or unmounted) on this machine;
    ``detail`` is one line naming the cause and, where there is one, the fix."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail
