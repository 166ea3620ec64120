"""Interactive sessions on SLURM: the runner of node 0 also serves its API, reached through the
login node.

A session's batch runners get ``--serve 0.0.0.0:0`` and a bearer token in their 0600 spec file
(beside the spec's own secrets); once bound each writes its port to ``runner.port`` in its state
dir on the shared filesystem. To reach it, one round trip to the login node reads the token from
the spec file, the port, and node 0's ``NodeAddr`` (as the batch script finds the coordinator);
the pool's SSH connection then forwards a local port to that address, so the compute node is
reached from the login node, never directly. The token is read each time, never stored here.
"""

from __future__ import annotations

import json
import secrets

from tcl.control.errors import AgentError, TclError

SERVE_ADDR = "0.0.0.0:0"  # every interface of the compute node (the login node must reach it)

# Run by the login node's python. argv: RUN_DIR STATE_DIR JOB_ID TOKEN_KEY PORT_FILE (the
# runner's names: tcl.runner.batch). One JSON line: {token, port, addr} or {why}.
RUNNER_PY = r"""
import json, os, subprocess, sys
run_dir, state_dir, job, key, port_file = sys.argv[1:6]

def out(**kw):
    print(json.dumps(kw))
    sys.exit(0)

try:
    port = int(open(os.path.join(state_dir, port_file)).read())
except (OSError, ValueError):
    out(why="its runner is not serving yet")
try:
    token = json.load(open(os.path.join(run_dir, "spec.json")))[key]
except (OSError, ValueError, KeyError):
    out(why="its spec file has no runner token")
nodes = subprocess.run(["squeue", "-h", "-j", job, "-o", "%N"], capture_output=True,
                       text=True).stdout.strip()
first = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True,
                       text=True).stdout.split()
if not first:
    out(why="it holds no node now")
row = subprocess.run(["scontrol", "show", "node", first[0], "-o"], capture_output=True,
                     text=True).stdout.split()
addr = next((w.split("=", 1)[1] for w in row if w.startswith("NodeAddr=")), first[0])
out(token=token, port=port, addr=addr)
"""


def new_token() -> str:
    return secrets.token_urlsafe(32)


def parse_answer(stdout: str, host: str) -> tuple[str, int, str]:
    """(token, port, node address) from :data:`RUNNER_PY`'s line."""
    try:
        answer = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AgentError(f"{host}: unreadable runner answer: {stdout[-200:]!r}") from None
    if "why" in answer:
        raise TclError(f"{host}: {answer['why']}")
    return str(answer["token"]), int(answer["port"]), str(answer["addr"])
