"""`python -m tcl.jobs.check KEY [--stop DIR]`: is KEY a job of the project here?

What `tcl submit --job` runs before anything ships, in a child process started in the directory
the job will start in: the project's job modules are imported exactly as the launcher on the host
will import them, and the CLI (or a long-lived daemon) never imports the user's code itself, so
an edited module is read afresh on every submit. One result line on stdout, after MARKER:
``{"status": "ok" | "unknown" | "error" | "unavailable", "known": [...], "detail": "..."}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tcl.jobs import deps

MARKER = "tcl.jobs.check: "


def _emit(result: dict[str, Any]) -> int:
    print(MARKER + json.dumps(result), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tcl.jobs.check", description=__doc__)
    p.add_argument("key")
    p.add_argument("--stop", type=Path, help="look for pyproject.toml no higher than this")
    a = p.parse_args(argv)
    lacking = deps.missing()
    if lacking:
        detail = f"{sys.executable} lacks {', '.join(lacking)} (the `jobs` extra)"
        return _emit({"status": "unavailable", "detail": detail})
    from tcl.jobs.errors import JobsError
    from tcl.jobs.registry import JOBS, load_jobs

    try:
        load_jobs(Path.cwd(), a.stop)
    except JobsError as e:
        return _emit({"status": "error", "detail": str(e)})
    if a.key in JOBS:
        return _emit({"status": "ok"})
    return _emit({"status": "unknown", "known": sorted(JOBS)})


if __name__ == "__main__":
    sys.exit(main())
