"""The ``slurm`` backend: runs as SLURM batch jobs, reached over SSH to the login node."""

from tcl.control.backends.slurm.backend import SlurmBackend
from tcl.control.backends.slurm.handle import SlurmHandle

__all__ = ["SlurmBackend", "SlurmHandle"]
