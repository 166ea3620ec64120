"""Many runs' ``squeue`` rows and ``status.json`` files in one round trip (``tcl ps``).

argv: ``SQUEUE_FIELDS``. stdin: ``{"jobs": [job id, ...], "dirs": [state dir, ...]}``.
stdout: one JSON line ``{"squeue": "...", "status": {dir: {...} | null, ...}}``: what
``squeue -h -t all -j ID,ID,... -O SQUEUE_FIELDS`` printed (empty with no job, or when squeue
failed) and each dir's parsed ``status.json`` (null when missing or unreadable).

Standard library only, and nothing past Python 3.7 at run time: the login node's interpreter
runs it, where tcl is not installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

STATUS_FILE = "status.json"


def main(argv: list[str]) -> int:
    fields = argv[0]
    req = json.load(sys.stdin)
    out: dict[str, Any] = {"squeue": "", "status": {}}
    if req["jobs"]:
        p = subprocess.run(
            ["squeue", "-h", "-t", "all", "-j", ",".join(req["jobs"]), "-O", fields],
            capture_output=True,
            text=True,
        )
        out["squeue"] = p.stdout
    for d in req["dirs"]:
        try:
            with open(os.path.join(d, STATUS_FILE)) as f:
                out["status"][d] = json.load(f)
        except (OSError, ValueError):
            out["status"][d] = None
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
