"""The distribution's layout and entry points."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import tcl

REPO = Path(__file__).resolve().parents[2]


def test_console_scripts_point_at_importable_mains() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"tcl", "tcl-shim", "tcl-runner"}
    for target in scripts.values():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func)), target


def test_version() -> None:
    assert tcl.__version__.count(".") == 2
