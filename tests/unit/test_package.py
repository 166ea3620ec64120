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


def test_distribution_name_and_version_are_the_packages() -> None:
    """Installers pin ``tcl.DISTRIBUTION==tcl.__version__``: both must be what is built."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert (project["name"], project["version"]) == (tcl.DISTRIBUTION, tcl.__version__)
    assert project["name"] != "tcl"  # taken on PyPI by an unrelated package
