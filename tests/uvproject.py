"""A user's uv project with dependencies tcl does not have, for the project-environment tests
(``tcl.runner.projectenv``): its packages are wheels made here and kept in the project
(``[tool.uv.sources]`` paths), and its ``uv.lock`` is made by ``uv lock --offline``, so building
its environment needs no network and no index."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import subprocess
import zipfile
from pathlib import Path

from tcl.runner.projectenv import uv_binary

DEP = "tclprobe_dep"  # in the project's dependencies
GROUP = "probes"  # a dependency group holding GROUP_DEP
GROUP_DEP = "tclprobe_extra"

PYPROJECT = f"""[project]
name = "probeproj"
version = "0.1.0"
requires-python = ">=3.11"
dependencies = ["{DEP.replace("_", "-")}==0.1.0"]

[dependency-groups]
{GROUP} = ["{GROUP_DEP.replace("_", "-")}==0.1.0"]

[tool.uv.sources]
{DEP.replace("_", "-")} = {{ path = "wheels/{DEP}-0.1.0-py3-none-any.whl" }}
{GROUP_DEP.replace("_", "-")} = {{ path = "wheels/{GROUP_DEP}-0.1.0-py3-none-any.whl" }}
"""

# What the job prints: where its python is, and which of the project's packages it imports.
JOB = """import importlib.util, sys
print("python", sys.prefix)
for name in ("tclprobe_dep", "tclprobe_extra"):
    print(name, "yes" if importlib.util.find_spec(name) else "no")
import tclprobe_dep
print("dep says", tclprobe_dep.HELLO)
"""


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    dest: Path, name: str, version: str, source: str = "", modules: dict[str, bytes] | None = None
) -> Path:
    """A pure-Python wheel of the package ``name`` (``source`` its ``__init__.py``, or
    ``modules`` its files by path), as a build of it would be."""
    info = f"{name}-{version}.dist-info"
    files = {
        **(modules or {f"{name}/__init__.py": source.encode()}),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n"
        ).encode(),
        f"{info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: tcl-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{p},sha256={_digest(d)},{len(d)}\n" for p, d in files.items())
    record += f"{info}/RECORD,,\n"
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for p, d in files.items():
            z.writestr(p, d)
        z.writestr(f"{info}/RECORD", record)
    return path


def uv_env() -> dict[str, str]:
    """No network for uv: no Python download, no index."""
    return {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_OFFLINE": "1"}


def installed_wheel(dest: Path, dist: str) -> tuple[str, Path]:
    """A wheel of the installed pure-Python distribution ``dist`` (its version, the file)."""
    d = importlib.metadata.distribution(dist)
    modules = {
        str(f): Path(str(d.locate_file(f))).read_bytes()
        for f in d.files or []
        if ".dist-info/" not in str(f) and str(f).endswith(".py")
    }
    return d.version, make_wheel(dest, dist, d.version, modules=modules)


def make_project(root: Path, remote: bool = False) -> Path:
    """The project at ``root``, locked (as its user would commit it). ``remote``: it depends
    on cloudpickle too (this installation's version, as a project using `@tcl.remote` does)."""
    root.mkdir(parents=True, exist_ok=True)
    make_wheel(root / "wheels", DEP, "0.1.0", 'HELLO = "from the project\'s lock"\n')
    make_wheel(root / "wheels", GROUP_DEP, "0.1.0", "X = 1\n")
    text = PYPROJECT
    if remote:
        version, wheel = installed_wheel(root / "wheels", "cloudpickle")
        text = text.replace(
            '==0.1.0"]\n\n[dependency-groups]',
            f'==0.1.0", "cloudpickle=={version}"]\n\n[dependency-groups]',
        )
        text += f'cloudpickle = {{ path = "wheels/{wheel.name}" }}\n'
    (root / "pyproject.toml").write_text(text)
    (root / "job.py").write_text(JOB)
    uv = uv_binary()
    assert uv is not None, "uv (a dependency of tcl) is not installed"
    subprocess.run(
        [uv, "lock", "--offline", "--quiet"], cwd=root, env=uv_env(), check=True, timeout=120
    )
    assert (root / "uv.lock").is_file()
    return root
