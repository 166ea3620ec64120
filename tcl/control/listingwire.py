"""The base of the records the ``tcl serve`` daemon sends the CLI for its reads (``tcl ps``,
``tcl hosts``, ``tcl metrics``, ``tcl matrix status``): a field neither side knows is an error,
never silently dropped."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
