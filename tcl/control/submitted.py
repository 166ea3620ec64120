"""What a submit started: its result, shared by the in-process submit, the ``tcl serve`` wire
schema (pydantic validates this dataclass) and the CLI (light to import: no control plane)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SubmitResult:
    run_id: str
    name: str
    host: str
    backend: str
    task_id: str
    accelerators: list[int]
    code_sha256: str
    code_bytes: int
    uploaded_bytes: int
    skipped: list[tuple[str, str]]
    ssh: bool  # whether `tcl ssh` can reach it
    nodes: int = 1
    state: str = "running"  # "queued": a scheduler holds it until nodes free up
