"""bench/_uiseed.py: the dashboard benchmark's store, seeded through tcl's own APIs, holds
what it says (the runs and entries in their mixes, each started entry with its run)."""

from __future__ import annotations

from pathlib import Path

from bench._uiseed import ENTRY_MIX, FAMILIES, FILTER_KEY, RUN_MIX, mix, seed
from tcl.control.states import RunState
from tcl.control.store import Store
from tcl.control.sweep.model import EntryState
from tcl.control.sweep.queue import SweepQueue


def test_mix_has_the_shares_and_is_deterministic() -> None:
    states = mix(RUN_MIX, 200, 2)
    assert len(states) == 200
    assert states.count(RunState.SUCCEEDED) == 110
    assert states.count(RunState.QUEUED) == 6
    assert states == mix(RUN_MIX, 200, 2)
    assert sorted(mix(ENTRY_MIX, 7, 1)) == sorted(mix(ENTRY_MIX, 7, 9))


def test_seeded_store_holds_the_runs_and_the_matrix(tmp_path: Path) -> None:
    seeded = seed(tmp_path / "bed", runs=120, entries=60)
    assert sum(seeded.runs.values()) == 120
    assert set(seeded.runs) == set(RUN_MIX)  # every run state is there
    assert seeded.entries == {
        EntryState.DONE: 33,
        EntryState.FAILED: 5,
        EntryState.RUNNING: 6,
        EntryState.CLAIMED: 1,
        EntryState.QUEUED: 15,
    }
    assert seeded.env()["TCL_STATE_DIR"] == str(seeded.state)

    store = Store(f"sqlite:///{seeded.state / 'tcl.db'}")
    queue = SweepQueue(store)
    try:
        runs = {r.id: r for r in store.list_runs(limit=10_000)}
        assert len(runs) == 120
        # each entry that started has its run, in the matching state; queued/claimed have none
        expect = {
            EntryState.DONE: RunState.SUCCEEDED,
            EntryState.FAILED: RunState.FAILED,
            EntryState.RUNNING: RunState.RUNNING,
        }
        for entry in queue.entries(seeded.matrix):
            assert entry.run_id is not None
            if entry.state in expect:
                assert runs[entry.run_id].state is expect[entry.state]
            else:
                assert entry.run_id not in runs
        attempts = {run_id: store.attempts(run_id) for run_id in runs}
        for run_id, run in runs.items():
            if run.state is RunState.PENDING:
                assert attempts[run_id] == []
            else:
                assert attempts[run_id], run_id
                assert attempts[run_id][-1].state is run.state
        retried = [a for a in attempts.values() if len(a) > 1]
        assert retried
        assert all(a.state is RunState.FAILED for tries in retried for a in tries[:-1])
        # the benchmark's filter keystroke narrows the runs to one family's
        keyed = [r for r in runs.values() if FILTER_KEY in r.name]
        assert keyed
        assert all(r.name.startswith("mixtral-") for r in keyed)
        assert [f for f in FAMILIES if FILTER_KEY in f] == ["mixtral"]
    finally:
        queue.close()
        store.close()
