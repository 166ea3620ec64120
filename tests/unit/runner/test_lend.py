"""What the runner lends a job's project environment (``tcl.runner.lend``): a directory of links
to distributions of the runner's environment, made for each job without reading the runner's
package metadata again (it cost ~0.1 s of each ``tcl.jobs`` job start)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from bench.runner_lend import listed_tops
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


@pytest.mark.parametrize("name", ["jaxlib", "numpy", "pyyaml", "flax"])
def test_the_top_level_paths_are_those_the_file_list_names(name: str) -> None:
    """Read from RECORD's text, not ``dist.files``: the same paths, for wheels of thousands of
    files (jaxlib's shared libraries at its top among them) and of a few."""
    dist = importlib.metadata.distribution(name)
    assert lend._top_level(dist) == listed_tops(dist) != set()


def test_a_record_s_quoted_odd_and_excluded_paths(tmp_path: Path) -> None:
    info = tmp_path / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    (info / "RECORD").write_text(
        "pkg/__init__.py,sha256=abc,10\n"
        "pkg/sub/mod.py,,\n"
        '"odd,name.py",sha256=def,3\n'
        '"quoted/with,comma.py",,\n'
        "lib.so,,\n"
        "pkg-1.0.dist-info/METADATA,,\n"
        "pkg-1.0.data/scripts/tool,,\n"
        "../../bin/tool,,\n"
        "__pycache__/lib.cpython-311.pyc,,\n"
        "pkg.pth,,\n"
    )
    dist = importlib.metadata.PathDistribution(info)
    tops = {p.name for p in lend._top_level(dist)}
    assert tops == {"pkg", "odd,name.py", "quoted", "lib.so"}
    assert lend._top_level(dist) == listed_tops(dist)
