"""Tell the shim the VM is going away, then wait for its tasks to end (the GCE
``shutdown-script``: a preemption or a stop).

argv: ``TOKEN_FILE PORT GRACE_S WAIT_S``: the shim's bearer token file (read here, so the token
never reaches a command line), its loopback port, the grace each job gets to checkpoint and
stop, and how long to wait for every task to end. stdin: unused. stdout: progress lines for the
VM's startup log, each starting ``tcl shutdown:``: the tasks notified, then ``no task running``
or what is still running after ``WAIT_S``.

``POST /api/preemption`` with ``{"message", "grace_s"}`` answers the tasks it notified; then
``GET /api/tasks`` is polled until none is live (not ``terminated``) or ``WAIT_S`` passed.
Exit status 0; 1 (a traceback) when the shim cannot be reached.

Standard library only: run where tcl's own modules are not imported.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from typing import Any

PREEMPTION_PATH = "/api/preemption"
TASKS_PATH = "/api/tasks"
ENDED_STATUS = "terminated"
MESSAGE = "the VM is being preempted or stopped"
POLL_S = 0.5


def main(argv: list[str]) -> int:
    token_file, port, grace_s, wait_s = argv[0], argv[1], float(argv[2]), float(argv[3])
    with open(token_file) as f:
        token = f.read().strip()
    base = f"http://127.0.0.1:{port}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def call(method: str, path: str, body: object = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(base + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + token)
        req.add_header("Content-Type", "application/json")
        with opener.open(req, timeout=5) as r:
            return json.load(r)

    deadline = time.monotonic() + wait_s
    notified = call("POST", PREEMPTION_PATH, {"message": MESSAGE, "grace_s": grace_s})
    print("tcl shutdown: notified", [t["id"] for t in notified], flush=True)
    live: list[str] = []
    while time.monotonic() < deadline:
        live = [t["id"] for t in call("GET", TASKS_PATH) if t["status"] != ENDED_STATUS]
        if not live:
            print("tcl shutdown: no task running", flush=True)
            break
        time.sleep(POLL_S)
    else:
        print(f"tcl shutdown: still running after {wait_s:.0f} s: {live}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
