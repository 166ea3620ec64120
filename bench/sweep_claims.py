"""Sweep claim throughput: 4 dispatcher processes draining 10,000 queued matrix entries.

Each dispatcher (a process of its own, started together behind a barrier) claims a batch of
entries from tcl's sweep queue (`SweepQueue.claim`, one statement) and finishes each claimed
entry (one guarded `SweepQueue.finish` per entry), until none is left; on SQLite (WAL, a file in
a temp dir) and on PostgreSQL 15 (a throwaway server started here with
scripts/testbed/pg-up.sh, BASE=/tmp/tcl-bench-pg PGPORT=54339, stopped at the end).

The baseline, measured in the same run, is the seed's dispatcher (seed 002, "How claims work")
implemented faithfully: a status JSON file of all entries keyed by job_id; a claim opens a lock
file, takes `fcntl.flock(LOCK_EX)`, `json.load`s the whole status file, flips the first
"queued" entry to "running" with pod and pid, `json.dump`s the whole file and releases; a finish
takes the lock, loads, sets "done", dumps. Each op rewrites the ~1.3 MB file, so the baseline
is measured on the first `--flock-claims` claims of the 10,000-entry file (by default; the output
says so) and its rate is claims/s (each claim with its finish), as for tcl.

Every figure counts double claims across the processes (each process reports the ids it
claimed): they must be 0 for all three. Target: tcl >= 50x the flock baseline, on both stores.

    uv run python -m bench.sweep_claims [--entries 10000] [--workers 4] [--batch 10]
        [--flock-claims 400] [--no-postgres]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import multiprocessing
import os
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tcl.control.store import Store
from tcl.control.sweep.model import EntryState
from tcl.control.sweep.queue import NewEntry, SweepQueue

REPO = Path(__file__).resolve().parent.parent
PG_ENV = {"BASE": "/tmp/tcl-bench-pg", "PGPORT": "54339"}
LANGS = ["spanish", "french", "german", "hindi", "swahili", "yoruba", "tamil", "welsh"]


def job_ids(n: int) -> list[str]:
    """Seed-style job ids (lang x cfg x seed x method), unique."""
    return [
        f"fft_{LANGS[i % len(LANGS)]}_cfg{'ABCD'[i // 8 % 4]}_s{i // 32 % 5}_main_{i:05d}"
        for i in range(n)
    ]


@dataclass(frozen=True)
class Result:
    what: str
    claimed: int
    elapsed_s: float
    doubles: int

    @property
    def rate(self) -> float:
        return self.claimed / self.elapsed_s


def _drain(target: Any, args: list[tuple[Any, ...]], what: str) -> Result:
    """Start one process per args tuple behind a barrier; each sends back (claimed ids, t0,
    t1); the rate is all claims over the span from the first start to the last end."""
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(len(args))
    out = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, start, out)) for a in args]
    for p in procs:
        p.start()
    results = [out.get(timeout=3600) for _ in procs]
    for p in procs:
        p.join(60)
        if p.exitcode != 0:
            raise SystemExit(f"{what}: a dispatcher process failed ({p.exitcode})")
    counts = Counter(i for ids, _, _ in results for i in ids)
    doubles = sum(n - 1 for n in counts.values() if n > 1)
    span = max(t1 for _, _, t1 in results) - min(t0 for _, t0, _ in results)
    return Result(what, sum(counts.values()), span, doubles)


# tcl ----------------------------------------------------------------------------------------


def _tcl_dispatcher(url: str, owner: str, batch: int, start: Any, out: Any) -> None:
    store = Store(url)
    queue = SweepQueue(store)
    claimed: list[int] = []
    start.wait(120)
    t0 = time.monotonic()
    while got := queue.claim(owner, batch, lease_s=600):
        for e in got:
            claimed.append(e.id)
            if not queue.finish(owner, e.id, EntryState.DONE):
                raise SystemExit(f"{owner}: finish of entry {e.id} refused")
    t1 = time.monotonic()
    out.put((claimed, t0, t1))
    queue.close()
    store.close()


def bench_tcl(url: str, what: str, entries: int, workers: int, batch: int) -> Result:
    store = Store(url)
    queue = SweepQueue(store)
    spec = {"argv": ["python", "train_fft.py"], "chips": 1}
    fresh = [NewEntry(j, {"job_id": j, "method": "fft", "seed": 42}) for j in job_ids(entries)]
    assert queue.add("bench", spec, fresh).added == entries
    args = [(url, f"{what}-d{i}", batch) for i in range(workers)]
    res = _drain(_tcl_dispatcher, args, what)
    left = queue.counts("bench")["bench"]
    queue.close()
    store.close()
    if left != {EntryState.DONE: entries}:
        raise SystemExit(f"{what}: entries left as {left}")
    return res


# the seed's flock + JSON dispatcher ---------------------------------------------------------


def _claim_job(lock_path: str, status_path: str, pod_name: str) -> str | None:
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # exclusive lock; blocks until acquired
        status: dict[str, dict[str, Any]] = json.load(open(status_path))  # noqa: SIM115 (seed's)
        for job_id, st in status.items():
            if st["state"] == "queued":
                st["state"] = "running"
                st["pod"] = pod_name
                st["pid"] = os.getpid()
                json.dump(status, open(status_path, "w"))  # noqa: SIM115
                return job_id
        return None


def _finish_job(lock_path: str, status_path: str, job_id: str) -> None:
    with open(lock_path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        status = json.load(open(status_path))  # noqa: SIM115
        status[job_id]["state"] = "done"
        status[job_id]["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        json.dump(status, open(status_path, "w"))  # noqa: SIM115


def _flock_dispatcher(
    lock_path: str, status_path: str, pod: str, limit: int, start: Any, out: Any
) -> None:
    claimed: list[str] = []
    start.wait(120)
    t0 = time.monotonic()
    while len(claimed) < limit:
        job_id = _claim_job(lock_path, status_path, pod)
        if job_id is None:
            break
        claimed.append(job_id)
        _finish_job(lock_path, status_path, job_id)
    t1 = time.monotonic()
    out.put((claimed, t0, t1))


def bench_flock(root: Path, entries: int, workers: int, claims: int) -> Result:
    status_path, lock_path = str(root / "matrix_status.json"), str(root / "claims.lock")
    status = {
        j: {
            "state": "queued",
            "pod": None,
            "pid": None,
            "gpu": None,
            "started_at": None,
            "finished_at": None,
        }
        for j in job_ids(entries)
    }
    with open(status_path, "w") as f:
        json.dump(status, f)
    claims = min(claims, entries)
    share = [claims // workers + (1 if i < claims % workers else 0) for i in range(workers)]
    args = [(lock_path, status_path, f"pod-{i}", share[i]) for i in range(workers)]
    res = _drain(_flock_dispatcher, args, "flock")
    with open(status_path) as f:
        done = sum(1 for st in json.load(f).values() if st["state"] == "done")
    if done != res.claimed:
        raise SystemExit(f"flock: {done} entries done after {res.claimed} claims")
    return res


# PostgreSQL ---------------------------------------------------------------------------------


@contextmanager
def pg_server() -> Iterator[str]:
    env = {**os.environ, **PG_ENV}
    scripts = REPO / "scripts" / "testbed"
    up = subprocess.run(
        ["bash", str(scripts / "pg-up.sh")], env=env, capture_output=True, text=True, check=False
    )
    if up.returncode != 0:
        raise SystemExit(f"pg-up.sh failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    url = up.stdout.strip().splitlines()[-1]
    try:
        yield url.replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        subprocess.run(
            ["bash", str(scripts / "pg-down.sh")], env=env, capture_output=True, check=False
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--entries", type=int, default=10000)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=10, help="entries per tcl claim")
    ap.add_argument(
        "--flock-claims",
        type=int,
        default=400,
        help="claims measured on the flock baseline (of --entries in its file)",
    )
    ap.add_argument("--no-postgres", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="tcl-bench-sweep-"))
    try:
        flock = bench_flock(root, args.entries, args.workers, args.flock_claims)
        status_mb = (root / "matrix_status.json").stat().st_size / 1e6
        results = [
            bench_tcl(
                f"sqlite:///{root / 'tcl.db'}", "sqlite", args.entries, args.workers, args.batch
            )
        ]
        if not args.no_postgres:
            with pg_server() as url:
                results.append(bench_tcl(url, "postgresql", args.entries, args.workers, args.batch))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"{args.entries} queued entries, {args.workers} dispatcher processes; each claim is "
        f"followed by one finish per entry claimed (tcl: batches of {args.batch}, guarded finish)"
    )
    part = (
        ""
        if flock.claimed >= args.entries
        else (
            f" (first {flock.claimed} claims of the {args.entries}-entry file only: the whole "
            f"drain would take ~{args.entries / flock.rate:.0f} s)"
        )
    )
    print(
        f"flock+JSON (seed):  {flock.claimed:6d} claims in {flock.elapsed_s:7.2f} s = "
        f"{flock.rate:9.1f} claims/s; double claims {flock.doubles}; status file "
        f"{status_mb:.1f} MB{part}"
    )
    for r in results:
        print(
            f"tcl {r.what + ':':15s} {r.claimed:6d} claims in {r.elapsed_s:7.2f} s = "
            f"{r.rate:9.1f} entries/s; double claims {r.doubles}; "
            f"ratio tcl/flock {r.rate / flock.rate:7.1f}x (target >= 50x)"
        )
    bad = [r.what for r in [flock, *results] if r.doubles]
    if bad:
        raise SystemExit(f"double claims in: {', '.join(bad)}")


if __name__ == "__main__":
    main()
