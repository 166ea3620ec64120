"""How a run's host was reached when it was placed: a typed, versioned record in its attempt.

A run outlives the config line that placed it (a host renamed or removed). Its attempt keeps
what its backend needs to reconnect (``handle["placement"]``), so ``tcl stop`` and ``tcl logs``
still reach the task: :meth:`tcl.control.service.Control.backend_for` uses the config when the
host is still there and this record otherwise. The record holds no secret: the shim's token is
read from the host (ssh) or the state dir (local) at connect time.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

PLACEMENT_VERSION = 1


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    version: int = PLACEMENT_VERSION


class LocalPlacement(_Record):
    """A shim on the workstation, found through its state dir."""

    kind: Literal["local"] = "local"
    shim_state_dir: str  # <state-dir>/local-shim: shim.json (pid, port) and the token
    executor: Literal["process", "docker"] = "process"
    fake_accelerators: str | None = None


class SshPlacement(_Record):
    """A shim on an SSH host: the SSH target, then the shim's dir and loopback port there."""

    kind: Literal["ssh"] = "ssh"
    ssh: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    proxy_jump: str | None = None
    ssh_config_file: str | None = None
    shim_dir: str
    shim_port: int
    shim_venv: str | None = None
    executor: Literal["docker", "process"] = "docker"


Placement = Annotated[LocalPlacement | SshPlacement, Field(discriminator="kind")]


class _Envelope(BaseModel):
    record: Placement


def dump_placement(p: LocalPlacement | SshPlacement) -> dict[str, Any]:
    return p.model_dump(mode="json")


def load_placement(data: object) -> LocalPlacement | SshPlacement | None:
    """The record kept in an attempt's handle; None when absent, unreadable or newer than
    this tcl (a run placed by a later version: the config is the only way to its host)."""
    if not isinstance(data, dict) or int(data.get("version", 0) or 0) > PLACEMENT_VERSION:
        return None
    try:
        return _Envelope.model_validate({"record": data}).record
    except ValidationError:
        return None
