"""``tcl submit --job KEY``: is KEY a job of the project being shipped? Checked before anything
ships, by ``python -m tcl.jobs.check`` in a child process started where the job will start.

A child process, not an import here: the project's job modules are the user's code (and import
JAX); importing them into the CLI, or into a long-lived process that submits, would keep a stale
copy after the user edits them and mix one repo's modules with another's.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tcl.control.errors import TclError

CHECK_TIMEOUT_S = 300.0  # importing JAX and the project's modules on a slow, busy laptop
MARKER = "tcl.jobs.check: "  # tcl.jobs.check.MARKER (not imported: that package needs JAX)


def job_dirs(cwd: Path, code_dir: Path | None) -> tuple[Path, Path | None]:
    """(start, stop) for the check: the job starts in the submit's directory when it lies in
    the shipped tree, else at its root; with ``--dir`` nothing above that tree is looked at."""
    if code_dir is None:
        return cwd, None
    root = code_dir.resolve()
    here = cwd.resolve()
    return (here if here.is_relative_to(root) else root), root


def check_job_key(key: str, start: Path, stop: Path | None = None) -> str | None:
    """Raise TclError when the project at ``start`` has no job ``key`` (or its job modules fail
    to import: the message carries the traceback). Returns a note when it cannot check here
    (this python lacks tcl's job dependencies): the launcher on the host checks it then."""
    argv = [sys.executable, "-m", "tcl.jobs.check", key]
    if stop is not None:
        argv += ["--stop", str(stop)]
    # CPU only (a key check needs no accelerator); no __pycache__ written into the user's tree.
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(
            argv,
            cwd=start,
            env=env,
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise TclError(
            f"checking --job {key} took over {CHECK_TIMEOUT_S:.0f} s "
            "(importing the project's job modules)"
        ) from None
    except OSError as e:
        raise TclError(f"cannot check --job {key}: {e}") from None
    result = _result(proc.stdout)
    if result is None:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-20:])
        raise TclError(f"checking --job {key} failed (exit code {proc.returncode}):\n{tail}")
    status = result.get("status")
    detail = str(result.get("detail", ""))
    if status == "ok":
        return None
    if status == "unavailable":
        return f"not checking --job {key} here: {detail}; the host checks it"
    if status == "error":
        raise TclError(detail)
    known = [str(k) for k in result.get("known", [])]
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise TclError(f"no job registered as {key!r}{hint} (the known ones: tcl jobs)")


def _result(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                data = json.loads(line[len(MARKER) :])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None
