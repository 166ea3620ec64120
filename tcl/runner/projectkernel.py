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

import json
import sys
from pathlib import Path

from tcl.runner.lend import link_dir

KERNEL_NAME = "python3"  # Jupyter's default kernel: what a new notebook starts
LENT_DIR = "kernel-import"  # links to ipykernel's distributions (tcl.runner.lend)

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


def kernel_env(where: Path, python: Path, env: dict[str, str]) -> dict[str, str]:
    """What to add to the Jupyter server's environment so that its ``python3`` kernel is
    ``python`` (the project environment's): ``JUPYTER_PATH`` with the kernel spec first
    (written under ``where``)."""
    spec_dir = where / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    start = _START.format(
        version=tuple(sys.version_info[:2]), links=str(link_dir(where / LENT_DIR, ["ipykernel"]))
    )
    spec = {
        "argv": [str(python), "-c", start, "-f", "{connection_file}"],
        "display_name": "Python 3 (the project's environment)",
        "language": "python",
        "metadata": {"debugger": True},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1) + "\n")
    paths = [str(where / "jupyter"), *filter(None, [env.get("JUPYTER_PATH")])]
    return {"JUPYTER_PATH": ":".join(paths)}
