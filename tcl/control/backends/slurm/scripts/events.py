"""One node's events after a seq, its ``status.json`` and the job's ``squeue`` row, as one
JSON line (the SLURM backend's ``events``).

argv: ``STATE_DIR AFTER LIMIT WAIT_S JOB_ID SQUEUE_FIELDS``. stdin: unused.
stdout: ``{"events": [line, ...], "last": N, "status": {...} | null, "squeue": "..."}``, where
each line is one event's JSON as the runner wrote it (at most ``LIMIT`` of them, the first with
seq ``AFTER + 1``), ``last`` the seq of the log's last event, ``status`` the parsed
``status.json`` (null when missing or unreadable) and ``squeue`` what
``squeue -h -t all -j JOB_ID -O SQUEUE_FIELDS`` printed (empty when it failed).

Read-only: the runner's event log (``tcl.runner.events``) is ``events/events.jsonl`` plus the
offset index ``events/events.idx`` (one little-endian u64 per event: the byte offset of its
line). With no event past ``AFTER`` yet it waits up to ``WAIT_S`` for one; a final status, or a
job SLURM ended (or no longer lists), answers at once.

Standard library only, and nothing past Python 3.7 at run time: the login node's interpreter
runs it, where tcl is not installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import sys
import time
from typing import Any

EVENTS_DIR = "events"
EVENTS_FILE = "events.jsonl"
INDEX_FILE = "events.idx"
INDEX_ENTRY = struct.Struct("<Q")  # the byte offset of one event's line
STATUS_FILE = "status.json"
FINAL_STATES = ("succeeded", "failed", "terminated")
MAX_BYTES = 2 * 1024 * 1024
# squeue states of a job that is waited on: queued (its first event comes soon after it
# starts) or on its nodes; any other state (or none) answers at once
WAITING = (
    "PENDING",
    "CONFIGURING",
    "RUNNING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESV_DEL_HOLD",
    "RESIZING",
    "SUSPENDED",
    "SIGNALING",
    "STAGE_OUT",
)
SQUEUE_EVERY_S = 2.0  # the event file is polled often; slurmctld (shared by every user) not
# two small reads on the login node each time: a new event is seen within this (it used to
# be 0.2 s once the runner had written its status: on average 0.1 s more on the way of a
# run's first line, bench/slurm_submit_latency.py)
POLL_S = 0.05


def squeue(job: str, fields: str) -> str:
    p = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", job, "-O", fields], capture_output=True, text=True
    )
    return p.stdout if p.returncode == 0 else ""


def read_status(state_dir: str) -> Any:
    try:
        with open(os.path.join(state_dir, STATUS_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_events(state_dir: str, after: int, limit: int) -> tuple[list[str], int]:
    """The lines of the events after ``after`` (at most ``limit``, about ``MAX_BYTES``, at
    least one when any exists) and the seq of the last event."""
    with contextlib.ExitStack() as files:
        try:
            idx = files.enter_context(open(os.path.join(state_dir, EVENTS_DIR, INDEX_FILE), "rb"))
            data = files.enter_context(open(os.path.join(state_dir, EVENTS_DIR, EVENTS_FILE), "rb"))
        except OSError:
            return [], 0
        last = os.fstat(idx.fileno()).st_size // INDEX_ENTRY.size
        if last <= after:
            return [], last
        count = min(limit, last - after)
        idx.seek(after * INDEX_ENTRY.size)
        (start,) = INDEX_ENTRY.unpack(idx.read(INDEX_ENTRY.size))
        data.seek(start)
        blob = data.read(MAX_BYTES)
        lines = blob.split(b"\n")[:-1][:count]  # complete lines only
        if not lines and count:  # one event larger than a page
            lines = [(blob + data.readline()).rstrip(b"\n")]
        return [line.decode("utf-8", "replace") for line in lines], last


def main(argv: list[str]) -> int:
    state_dir, job, fields = argv[0], argv[4], argv[5]
    after, limit, wait_s = int(argv[1]), int(argv[2]), float(argv[3])
    deadline = time.monotonic() + wait_s
    asked = 0.0
    while True:
        status = read_status(state_dir)
        events, last = read_events(state_dir, after, limit)
        final = isinstance(status, dict) and status.get("state") in FINAL_STATES
        if events or final or time.monotonic() >= deadline:
            break
        # a pending job is waited on too (its first event comes soon after it starts); a job
        # SLURM ended (or no longer lists) without a final status answers at once
        if time.monotonic() - asked >= SQUEUE_EVERY_S:
            asked = time.monotonic()
            rows = squeue(job, fields)
            if not any(f"|{s}|" in rows for s in WAITING):
                break
        time.sleep(POLL_S)
    answer = {"events": events, "last": last, "status": status, "squeue": squeue(job, fields)}
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
