"""The placement flags `tcl submit` and `tcl repl` share (one definition, one help text)."""

from __future__ import annotations

from typing import Annotated

import typer

NameOpt = Annotated[str, typer.Option("--name", help="A name for the run.")]
ChipOpt = Annotated[str | None, typer.Option("--chip", help="Chip type, e.g. h100.")]
ChipsOpt = Annotated[int, typer.Option("-n", "--chips", min=0, help="How many chips (in all).")]
HostOpt = Annotated[str | None, typer.Option("--host", help="Only this host.")]
ImageOpt = Annotated[str | None, typer.Option("--image", help="Container image.")]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option("--env", help="KEY=VALUE, or KEY: this shell's value (repeatable)."),
]
SecretOpt = Annotated[
    list[str] | None,
    typer.Option("--secret", help="NAME of an env var to pass as a masked secret."),
]
ClusterOpt = Annotated[
    list[str] | None,
    typer.Option("--cluster", help="Only hosts of this cluster (repeatable)."),
]
AvoidClusterOpt = Annotated[
    list[str] | None,
    typer.Option("--avoid-cluster", help="No host of this cluster (repeatable)."),
]
GroupOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--group",
        help="A dependency group of the project's uv.lock to sync into the job's environment "
        "(repeatable; added to the host's uv_groups).",
    ),
]
ProjectEnvOpt = Annotated[
    bool,
    typer.Option(
        "--project-env/--host-env",
        help="Run in the shipped project's environment, built from its uv.lock on the host "
        "(default); --host-env: in the host's own.",
    ),
]
DirOpt = Annotated[
    str | None,
    typer.Option(
        "--dir", help="Ship this directory (default: the current git repo, else the cwd)."
    ),
]
