"""``tcl repl``'s notebook kernel in the job's project environment.

Jupyter Lab itself runs where the runner finds it (tcl's environment), but its ``python3``
kernel is the project's: a kernel spec of that name, put first on ``JUPYTER_PATH``, starts the
project environment's ``python`` by its path (a bare ``python`` would be Jupyter's own: its
kernel manager takes that name for its own interpreter), so the notebook imports what the
project's lock holds, as the job would.

A project need not list ipykernel: the kernel then takes ipykernel and what it needs (no
other package of tcl's environment) from a directory of links to those distributions only,
appended to its path after the project's own packages, which win. The links are used only by
an interpreter of the runner's own Python version (they hold compiled modules); another
version must have ipykernel in the project, and the kernel says so in the job's log.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import re
import sys
from pathlib import Path

KERNEL_NAME = "python3"  # Jupyter's default kernel: what a new notebook starts
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_FOR_AN_EXTRA = re.compile(r";.*\bextra\s*==")

# Run by the project's python as ``python -c``: ipykernel_launcher's start, with the links as
# a last resort after the project's own packages.
_START = """\
import sys
if sys.path and sys.path[0] == "":
    del sys.path[0]  # IPython puts the notebook's directory back
if sys.version_info[:2] == {version!r}:
    sys.path.append({links!r})
try:
    from ipykernel import kernelapp
except ImportError as e:
    sys.exit(
        f"tcl repl: the project's Python {{sys.version_info[0]}}.{{sys.version_info[1]}} has no "
        f"ipykernel ({{e}}): add it to the project (uv add --dev ipykernel)"
    )
kernelapp.launch_new_instance()
"""


def distributions_needed(top: str = "ipykernel") -> list[importlib.metadata.Distribution]:
    """``top``'s installed distribution and those it requires, transitively (requirements of
    extras left out; one not installed here is skipped: its marker excluded it)."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = [top]
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


def _top_level(dist: importlib.metadata.Distribution) -> set[Path]:
    """The paths in site-packages that ``dist`` installed at its top (packages, modules, the
    shared libraries some wheels bring along), never its metadata or scripts."""
    out: set[Path] = set()
    for f in dist.files or []:
        parts = Path(str(f)).parts
        if not parts or parts[0] == ".." or parts[0].endswith((".dist-info", ".data")):
            continue
        if parts[0] == "__pycache__" or parts[0].endswith(".pth"):
            continue
        out.add(Path(str(dist.locate_file(parts[0]))))
    return out


def link_dir(where: Path) -> Path:
    """``where/kernel-import``: links to ipykernel's distributions as installed here."""
    here = where / "kernel-import"
    here.mkdir(parents=True, exist_ok=True, mode=0o700)
    for dist in distributions_needed():
        for path in _top_level(dist):
            link = here / path.name
            if path.exists() and not link.is_symlink():
                with contextlib.suppress(FileExistsError):
                    link.symlink_to(path, target_is_directory=path.is_dir())
    return here


def kernel_env(where: Path, python: Path, env: dict[str, str]) -> dict[str, str]:
    """What to add to the Jupyter server's environment so that its ``python3`` kernel is
    ``python`` (the project environment's): ``JUPYTER_PATH`` with the kernel spec first
    (written under ``where``)."""
    spec_dir = where / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    start = _START.format(version=tuple(sys.version_info[:2]), links=str(link_dir(where)))
    spec = {
        "argv": [str(python), "-c", start, "-f", "{connection_file}"],
        "display_name": "Python 3 (the project's environment)",
        "language": "python",
        "metadata": {"debugger": True},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    paths = [str(where / "jupyter"), *filter(None, [env.get("JUPYTER_PATH")])]
    return {"JUPYTER_PATH": ":".join(paths)}
