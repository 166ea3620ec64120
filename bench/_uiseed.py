"""A state store full of history, for the dashboard's benchmark (not a benchmark itself).

:func:`seed` makes a throwaway HOME, state dir and config under a root folder and fills the
state store (SQLite) through tcl's own APIs, so every row is one tcl could have written:

- a matrix of ``entries`` entries (``tcl matrix add``'s grid, spec and ``SweepQueue.add``),
  moved through the queue's guarded writers (claim, started, finish, release) into a mix of
  queued, claimed, running, done and failed; each entry that started has its run, made as the
  scheduler makes it (``stored_request`` of the entry's submission, under the entry's run id);
- standalone runs up to ``runs`` in all (the matrix's among them), in a mix of every run state,
  moved through ``Store.set_state`` / ``add_attempt`` / ``update_attempt`` as a placement, its
  retries and its end would; some have several attempts (earlier ones failed and retried).

The config names no hosts, so nothing the dashboard might do reaches a real machine; the runs'
hosts (``gpu-00``..) and their handles are made up. Everything is deterministic (index-based).

Seeding alone: ``uv run python -m bench.ui_load --seed-only DIR [--runs N] [--entries M]``.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tcl.control.backends.shimhandle import ShimHandle, ShimNode
from tcl.control.lifecycle.retry_policy import RetryPolicy
from tcl.control.lifecycle.submit import Submission, stored_request
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import Store, new_run_id
from tcl.control.sweep import manifest
from tcl.control.sweep.model import Entry, EntryState
from tcl.control.sweep.queue import NewEntry, SweepQueue
from tcl.control.sweep.spec import MatrixSpec
from tcl.control.sweep.submission import run_name, submission

MATRIX = "lr-sweep"
HOSTS = [f"gpu-{i:02d}" for i in range(8)]
# Run names by model family. Only "mixtral" has an "x" (no state, host, id or matrix name has
# one), so typing "x" in the runs page's search narrows it to those runs (a fifth).
FAMILIES = ["llama", "gpt", "vit", "bert", "mixtral"]
FILTER_KEY = "x"
# Shares of each state (largest remainder rounding; the rest are shuffled by a fixed seed).
RUN_MIX = {
    RunState.SUCCEEDED: 0.55,
    RunState.FAILED: 0.15,
    RunState.TERMINATED: 0.08,
    RunState.RUNNING: 0.12,
    RunState.QUEUED: 0.03,
    RunState.PROVISIONING: 0.02,
    RunState.PENDING: 0.05,
}
ENTRY_MIX = {
    EntryState.DONE: 0.55,
    EntryState.FAILED: 0.08,
    EntryState.RUNNING: 0.10,
    EntryState.CLAIMED: 0.02,
    EntryState.QUEUED: 0.25,
}
_RUN_OF_ENTRY = {
    EntryState.DONE: RunState.SUCCEEDED,
    EntryState.FAILED: RunState.FAILED,
    EntryState.RUNNING: RunState.RUNNING,
}
LEASE_S = 30 * 86400.0  # the seeded leases outlive the benchmark: nothing reaps them
OWNER = "bench-ui-seed"


@dataclass(frozen=True)
class Seeded:
    root: Path
    home: Path
    state: Path
    config: Path
    matrix: str
    runs: Counter[RunState]
    entries: Counter[EntryState]
    elapsed_s: float

    def env(self) -> dict[str, str]:
        """The environment a ``tcl`` command needs to see this state (and nothing else)."""
        env = {k: v for k, v in os.environ.items() if k not in ("TCL_DB_URL", "TCL_CODE_CACHE_DIR")}
        return {
            **env,
            "HOME": str(self.home),
            "TCL_STATE_DIR": str(self.state),
            "TCL_CONFIG": str(self.config),
            "NO_COLOR": "1",
        }


S = TypeVar("S", RunState, EntryState)


def mix(shares: dict[S, float], n: int, seed: int) -> list[S]:
    """``n`` states in the given shares (largest remainder), shuffled by ``seed``."""
    exact = {st: share * n for st, share in shares.items()}
    counts = {st: int(x) for st, x in exact.items()}
    by_remainder = sorted(exact, key=lambda st: exact[st] - counts[st], reverse=True)
    for st in by_remainder[: n - sum(counts.values())]:
        counts[st] += 1
    out = [st for st, k in counts.items() for _ in range(k)]
    random.Random(seed).shuffle(out)
    return out


def _handle(host: str, run_id: str, attempt: int, released: bool) -> dict[str, object]:
    node = ShimNode(host=host, task_id=f"{run_id}-a{attempt}", runner_port=41000 + attempt)
    return ShimHandle(kind="ssh", nodes=[node], released=released).model_dump(mode="json")


def _attempt(store: Store, run_id: str, host: str, ended: RunState | None) -> int:
    """One attempt placed on ``host``, running, then ``ended`` (None: still running)."""
    att = store.add_attempt(run_id, host, "ssh")
    handle = _handle(host, run_id, att.attempt, released=ended is not None)
    store.update_attempt(run_id, att.attempt, state=RunState.RUNNING, handle=handle)
    if ended is not None:
        store.update_attempt(run_id, att.attempt, state=ended, cause=AttemptCause.of_end(ended))
    return att.attempt


def advance(store: Store, run_id: str, target: RunState, i: int) -> None:
    """Move a pending run to ``target`` the way placement, retries and endings do."""
    if target is RunState.PENDING:
        return
    host = HOSTS[i % len(HOSTS)]
    store.set_placement(run_id, host, "ssh", None)
    if target is RunState.QUEUED:  # a batch scheduler's queue holds it (its attempt queued)
        att = store.add_attempt(run_id, host, "ssh")
        handle = _handle(host, run_id, att.attempt, released=False)
        store.update_attempt(run_id, att.attempt, state=RunState.QUEUED, handle=handle)
        store.set_state(run_id, RunState.QUEUED, message="waiting for nodes (Resources)")
        return
    store.set_state(run_id, RunState.PROVISIONING)
    if target is RunState.PROVISIONING:
        store.add_attempt(run_id, host, "ssh")  # its task not made yet: no handle
        return
    retries = 1 + (i // 7) % 2 if i % 7 == 3 else 0  # one run in 7 failed once or twice first
    for _ in range(retries):
        _attempt(store, run_id, host, RunState.FAILED)
        store.set_state(run_id, RunState.RUNNING)
        store.set_state(run_id, RunState.QUEUED, message="exit 1; placing it again")
        store.set_state(run_id, RunState.PROVISIONING)
    ended = None if target is RunState.RUNNING else target
    _attempt(store, run_id, host, ended)
    store.set_state(run_id, RunState.RUNNING)
    if target is RunState.SUCCEEDED:
        store.set_state(run_id, target, exit_code=0)
    elif target is RunState.FAILED:
        store.set_state(run_id, target, exit_code=1, message="exit 1: loss is nan at step 1200")
    elif target is RunState.TERMINATED:
        store.set_state(run_id, target, message="stopped by user")


def _grid(n: int) -> list[dict[str, object]]:
    """``n`` entries of ``tcl matrix add --grid lr=... --grid seed=...`` (the last cut off)."""
    lrs = ["1e-4", "2e-4", "3e-4", "5e-4", "1e-3", "2e-3", "3e-3", "5e-3", "1e-2", "2e-2"]
    seeds = ",".join(str(s) for s in range(max(1, -(-n // len(lrs)))))
    return manifest.grid([f"lr={','.join(lrs)}", f"seed={seeds}"])[:n]


def seed_matrix(store: Store, queue: SweepQueue, n: int, config: Path) -> Counter[EntryState]:
    """The matrix, its entries moved into :data:`ENTRY_MIX`, each started one with its run."""
    argv = ["python", "train.py", "--lr", "{lr}", "--seed", "{seed}"]
    entries = _grid(n)
    manifest.check_template(argv, entries)
    spec = MatrixSpec(
        argv=argv,
        chip="h100",
        chips=8,
        code_sha256="0" * 64,
        config_path=str(config),
        config_named=True,
        retry=RetryPolicy(),
    )
    queue.add(
        MATRIX,
        spec.model_dump(mode="json"),
        [
            NewEntry(str(e["job_id"]), {k: v for k, v in e.items() if k != "job_id"})
            for e in entries
        ],
    )
    claimed = queue.claim(OWNER, n, LEASE_S, [MATRIX])
    for i, (entry, state) in enumerate(zip(claimed, mix(ENTRY_MIX, n, 1), strict=True)):
        _entry_to(store, queue, spec, entry, state, i)
    counts = queue.counts(MATRIX).get(MATRIX, {})
    return Counter({st: k for st, k in counts.items()})


def _entry_to(
    store: Store, queue: SweepQueue, spec: MatrixSpec, entry: Entry, state: EntryState, i: int
) -> None:
    if state is EntryState.QUEUED:  # nothing could place it yet
        queue.release(OWNER, entry.id, 0.0, "no host has 8 x h100 free")
        return
    if state is EntryState.CLAIMED:
        return
    assert entry.run_id is not None
    request = stored_request(submission(spec, entry), spec.job_cwd)
    store.create_run(entry.run_id, run_name(entry), request, code_sha256=spec.code_sha256)
    advance(store, entry.run_id, _RUN_OF_ENTRY[state], i)
    queue.started(OWNER, entry.id)
    if state is not EntryState.RUNNING:
        error = "" if state is EntryState.DONE else "exit 1: loss is nan at step 1200"
        queue.finish(OWNER, entry.id, state, error)


def seed_runs(store: Store, n: int) -> None:
    """``n`` standalone runs, in :data:`RUN_MIX`."""
    for i, state in enumerate(mix(RUN_MIX, n, 2)):
        family = FAMILIES[i % len(FAMILIES)]
        name = f"{family}-{(i * 37) % 9 + 1}b-ft{i}"
        sub = Submission(
            argv=["python", "train.py", "--model", family, "--steps", "20000"],
            name=name,
            chip="h100",
            chips=8,
        )
        run_id = new_run_id(name)
        store.create_run(run_id, name, stored_request(sub, ""), code_sha256="1" * 64)
        advance(store, run_id, state, i)


def seed(root: Path, runs: int, entries: int) -> Seeded:
    """A fresh HOME, state dir and config under ``root``, the store seeded: ``runs`` runs in
    all (the matrix's started entries' runs among them) and a matrix of ``entries``."""
    t0 = time.perf_counter()
    home, state, config = root / "home", root / "state", root / "config.yaml"
    home.mkdir(parents=True)
    state.mkdir(mode=0o700)
    config.write_text("hosts: {}\n")
    store = Store(f"sqlite:///{state / 'tcl.db'}")
    try:
        by_entry = _fill(store, runs, entries, config)
        by_run = Counter(r.state for r in store.list_runs(limit=1_000_000))
    finally:
        store.close()
    return Seeded(root, home, state, config, MATRIX, by_run, by_entry, time.perf_counter() - t0)


def _fill(store: Store, runs: int, entries: int, config: Path) -> Counter[EntryState]:
    queue = SweepQueue(store)
    try:
        by_entry = seed_matrix(store, queue, entries, config)
    finally:
        queue.close()
    made = len(store.list_runs(limit=1_000_000))
    if made > runs:
        raise SystemExit(f"--runs {runs}: the matrix's entries made {made} runs already")
    seed_runs(store, runs - made)
    return by_entry


def describe(s: Seeded) -> Iterator[str]:
    def line(counts: Counter[RunState] | Counter[EntryState]) -> str:
        return ", ".join(f"{st} {k}" for st, k in sorted(counts.items(), key=lambda x: -x[1]))

    yield f"seeded {s.root} in {s.elapsed_s:.1f} s"
    yield f"  runs {sum(s.runs.values())}: {line(s.runs)}"
    yield f"  matrix {s.matrix}, entries {sum(s.entries.values())}: {line(s.entries)}"
    yield f"  HOME={s.home} TCL_STATE_DIR={s.state} TCL_CONFIG={s.config}"
