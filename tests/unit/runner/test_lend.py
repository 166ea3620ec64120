"""What the runner lends a job's project environment (``tcl.runner.lend``): a directory of links
to distributions of the runner's environment, made for each job without reading the runner's
package metadata again (it cost ~0.1 s of each ``tcl.jobs`` job start)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from tcl.runner import lend


def test_each_job_s_link_dir_reads_the_metadata_once_a_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lend.lent_paths.cache_clear()  # another test of this process may have read it already
    first = lend.link_dir(tmp_path / "job-1", ["pyyaml"])
    names = sorted(p.name for p in first.iterdir())
    assert "yaml" in names and all((first / n).is_symlink() for n in names)
    assert not any(n.endswith(".dist-info") for n in names)  # packages only, not metadata
    asked: list[str] = []
    real = importlib.metadata.distribution

    def counted(name: str) -> importlib.metadata.Distribution:
        asked.append(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", counted)
    second = lend.link_dir(tmp_path / "job-2", ["pyyaml"])
    assert sorted(p.name for p in second.iterdir()) == names
    assert [(second / n).resolve() for n in names] == [(first / n).resolve() for n in names]
    assert asked == []
