"""Distributions of the runner's environment lent to a job's project environment.

A program of tcl's run on the project's python (``tcl repl``'s kernel needs ipykernel, a
``tcl.jobs`` job needs JAX & co.) may find what the project does not list in a directory of
links to just those distributions, as installed beside the runner, which it appends to its
path after the project's own packages (the project's versions win). The links hold compiled
modules: only an interpreter of the runner's Python version may use them.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import re
from collections.abc import Sequence
from pathlib import Path

_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FOR_AN_EXTRA = re.compile(r";.*\bextra\s*==")
# a RECORD line's path up to its first separator (csv: a path with a comma is quoted)
_RECORD_TOP = re.compile(r'^(?:"([^"/\\\r\n]+)|([^"/\\,\r\n]+))', re.MULTILINE)


def distributions_needed(tops: Sequence[str]) -> list[importlib.metadata.Distribution]:
    """``tops``' installed distributions and those they require, transitively (requirements of
    extras left out; one not installed here is skipped: its marker excluded it)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(tops)
    while todo:
        name = todo.pop().lower().replace("_", "-")
        if name in found:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found[name] = dist
        for req in dist.requires or []:
            if _FOR_AN_EXTRA.search(req):
                continue
            m = _REQUIREMENT_NAME.match(req)
            if m:
                todo.append(m.group(0))
    return sorted(found.values(), key=lambda d: d.metadata["Name"].lower())


def _installed_tops(dist: importlib.metadata.Distribution) -> set[str]:
    """The first part of each path ``dist`` installed (relative to site-packages): from its
    ``RECORD``'s first column, read as text by one regex, not from ``dist.files``, whose one
    ``PackagePath`` a file cost ~0.1 s a process for JAX & co.'s ~20,000 files."""
    text = dist.read_text("RECORD")
    if text is None:  # not installed from a wheel (an egg-info): what it lists, however
        return {Path(str(f)).parts[0] for f in dist.files or [] if str(f)}
    return {quoted or plain for quoted, plain in _RECORD_TOP.findall(text)}


def _top_level(dist: importlib.metadata.Distribution) -> set[Path]:
    """The paths in site-packages that ``dist`` installed at its top (packages, modules, the
    shared libraries some wheels bring along), never its metadata or scripts."""
    return {
        Path(str(dist.locate_file(top)))
        for top in _installed_tops(dist)
        if top not in ("..", "__pycache__") and not top.endswith((".dist-info", ".data", ".pth"))
    }


@functools.cache
def lent_paths(tops: tuple[str, ...]) -> tuple[Path, ...]:
    """The top-level paths of ``tops``' distributions and what they require, as installed in
    the runner's environment. Read once a process (the runner's environment does not change
    under it; the fork server reads it before it forks any runner): reading every
    distribution's metadata and file list cost ~0.1 s of each job start."""
    return tuple(
        path
        for dist in distributions_needed(tops)
        for path in sorted(_top_level(dist))
        if path.exists()
    )


def link_dir(here: Path, tops: Sequence[str]) -> Path:
    """``here``, made a directory of links to ``tops``' distributions (and what they require)
    as installed in the runner's environment."""
    here.mkdir(parents=True, exist_ok=True, mode=0o700)
    for path in lent_paths(tuple(tops)):
        link = here / path.name
        if not link.is_symlink():
            with contextlib.suppress(FileExistsError):
                link.symlink_to(path, target_is_directory=path.is_dir())
    return here
