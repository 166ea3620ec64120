"""Scripts run on the login node (``python -c SCRIPT ARGS``, the cluster's interpreter).

Each answers in one round trip, as one JSON line: a node's events after a seq (read-only: the
runner's event log is an ``events.jsonl`` plus an offset index ``events.idx``, see
``tcl.runner.events``) with its ``status.json`` and the job's ``squeue`` row; or many runs'
squeue rows and status files at once (``tcl ps``).
"""

from __future__ import annotations

# argv: STATE_DIR AFTER LIMIT WAIT_S JOB_ID SQUEUE_FIELDS
EVENTS_PY = r"""
import json, os, struct, subprocess, sys, time
d, after, limit, wait_s, job, fields = sys.argv[1:7]
after, limit, wait_s = int(after), int(limit), float(wait_s)
MAX_BYTES = 2 * 1024 * 1024
LIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD",
        "REQUEUE_FED", "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT")

def squeue():
    p = subprocess.run(["squeue", "-h", "-t", "all", "-j", job, "-O", fields],
                       capture_output=True, text=True)
    return p.stdout if p.returncode == 0 else ""

def status():
    try:
        with open(os.path.join(d, "status.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def read():
    try:
        idx = open(os.path.join(d, "events", "events.idx"), "rb")
        data = open(os.path.join(d, "events", "events.jsonl"), "rb")
    except OSError:
        return [], 0
    with idx, data:
        last = os.fstat(idx.fileno()).st_size // 8
        if last <= after:
            return [], last
        count = min(limit, last - after)
        idx.seek(after * 8)
        (start,) = struct.unpack("<Q", idx.read(8))
        data.seek(start)
        blob = data.read(MAX_BYTES)
        lines = blob.split(b"\n")[:-1][:count]  # complete lines only
        if not lines and count:  # one event larger than a page
            lines = [(blob + data.readline()).rstrip(b"\n")]
        return [l.decode("utf-8", "replace") for l in lines], last

deadline = time.monotonic() + wait_s
asked = 0.0
while True:
    st = status()
    events, last = read()
    final = st is not None and st.get("state") in ("succeeded", "failed", "terminated")
    if events or final or time.monotonic() >= deadline:
        break
    # the event file is polled often; slurmctld (shared by every user) only every 2 s. A
    # pending job is waited on too (its first event comes soon after it starts); a job SLURM
    # ended (or no longer lists) without a final status answers at once.
    if time.monotonic() - asked >= 2.0:
        asked = time.monotonic()
        q = squeue()
        if not any(f"|{s}|" in q for s in LIVE):
            break
    time.sleep(0.05 if st is None else 0.2)
print(json.dumps({"events": events, "last": last, "status": st, "squeue": squeue()}))
"""

# argv: SQUEUE_FIELDS; stdin: {"jobs": [ids], "dirs": [state dirs]}
STATUSES_PY = r"""
import json, os, subprocess, sys
fields = sys.argv[1]
req = json.load(sys.stdin)
out = {"squeue": "", "status": {}}
if req["jobs"]:
    p = subprocess.run(["squeue", "-h", "-t", "all", "-j", ",".join(req["jobs"]), "-O", fields],
                       capture_output=True, text=True)
    out["squeue"] = p.stdout
for d in req["dirs"]:
    try:
        with open(os.path.join(d, "status.json")) as f:
            out["status"][d] = json.load(f)
    except (OSError, ValueError):
        out["status"][d] = None
print(json.dumps(out))
"""
