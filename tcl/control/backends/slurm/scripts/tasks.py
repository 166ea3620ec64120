"""This user's pending and running jobs whose name tcl gives (``tcl-<run id>-<attempt>``),
with their age, for the orphan sweep (:mod:`tcl.control.lifecycle.orphans`).

argv: none. stdin: none. stdout: one JSON line ``{"jobs": [{"job_id": "123", "name":
"tcl-r-0", "age_s": 12.0}, ...], "error": ""}``: ``squeue --me`` read here, the submit time
turned into an age with this node's clock and time zone (those ``squeue`` prints it in); on
failure no jobs and squeue's error.

Standard library only, and nothing past Python 3.7 at run time: the login node's interpreter
runs it, where tcl is not installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

PREFIX = "tcl-"
FORMAT = "%i|%j|%V"  # job id, name, submit time (YYYY-MM-DDTHH:MM:SS, local)


def main(argv: list[str]) -> int:
    p = subprocess.run(
        ["squeue", "--me", "-h", "-t", "PENDING,RUNNING,SUSPENDED,REQUEUED", "-o", FORMAT],
        capture_output=True,
        text=True,
    )
    out: dict[str, Any] = {"jobs": [], "error": ""}
    if p.returncode != 0:
        out["error"] = p.stderr.strip()[-500:]
        print(json.dumps(out))
        return 0
    now = time.time()
    for line in p.stdout.splitlines():
        cells = line.strip().split("|")
        if len(cells) != 3 or not cells[1].startswith(PREFIX):
            continue
        try:
            submitted = time.mktime(time.strptime(cells[2], "%Y-%m-%dT%H:%M:%S"))
        except ValueError:
            continue  # no submit time: too young to tell
        out["jobs"].append({"job_id": cells[0], "name": cells[1], "age_s": now - submitted})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
