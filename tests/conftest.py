"""Shared pytest setup: markers by folder, and the real-service fixtures of tests/testbed.py."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.testbed"]

_TESTS = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if _TESTS / "unit" in path.parents:
            item.add_marker(pytest.mark.unit)
        elif _TESTS / "integration" in path.parents:
            item.add_marker(pytest.mark.integration)
