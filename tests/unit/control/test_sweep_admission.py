"""How many entries a scheduler claims: all it has room for until a refusal, then as many as
runs ended, one probe per window, and credits that double with each success of a probe."""

from __future__ import annotations

from tcl.control.sweep.admission import Admission


def test_claims_all_it_has_room_for_until_refused() -> None:
    a = Admission(room=16, full_wait_s=2.0)
    assert a.limit(placing=0, now=0.0) == 16
    assert a.limit(placing=10, now=0.0) == 6
    a.placed()  # successes while not full change nothing
    assert a.limit(placing=0, now=0.0) == 16


def test_when_full_it_claims_one_per_run_ended_and_probes_once_per_window() -> None:
    a = Admission(room=16, full_wait_s=2.0)
    a.refused(now=10.0)
    assert a.limit(0, 10.5) == 0  # nothing ended, the window not over: no churn
    a.run_ended()
    a.run_ended()
    assert a.limit(0, 10.5) == 2
    a.took(2)
    assert a.limit(0, 10.5) == 0
    assert a.limit(0, 12.0) == 1  # the window passed: one probe
    a.took(1)
    assert a.limit(0, 12.5) == 0  # and only one per window


def test_successes_of_a_probe_double_the_claims_until_it_is_not_full() -> None:
    a = Admission(room=8, full_wait_s=2.0)
    a.refused(now=0.0)
    grants = []
    for _ in range(4):
        n = a.limit(0, 2.1)  # the first: a probe (someone else freed room)
        grants.append(n)
        a.took(n)
        a.placed()
    assert grants == [1, 2, 4, 8]
    assert not a.full and a.limit(0, 0.1) == 8
    a.refused(now=1.0)
    assert a.full and a.limit(0, 1.1) == 0


def test_a_refusal_keeps_the_claims_of_runs_that_ended_after_it_was_claimed() -> None:
    a = Admission(room=8, full_wait_s=2.0)
    a.refused(now=0.0)
    a.run_ended()
    assert a.limit(0, 0.1) == 1
    a.took(1)
    a.run_ended()  # another GPU frees while that claim is being placed
    a.refused(now=0.2)  # the claimed one found nothing (someone else took the first GPU)
    assert a.limit(0, 0.3) == 1  # the second freed GPU is still claimed for, not after 2 s


def test_an_entry_placed_in_a_slot_its_runs_freed_earns_no_more_claims() -> None:
    """A full cluster in steady state: each run's end claims one entry, placed in its slot;
    nothing more is claimed until the next end or the next probe (each success used to earn
    two claims, both refused: two runs made and deleted for each one placed)."""
    a = Admission(room=16, full_wait_s=2.0)
    a.refused(now=0.0)
    for i in range(5):
        a.run_ended()
        assert a.limit(0, 0.1 + i * 0.1) == 1
        a.took(1)
        a.placed()
        assert a.limit(0, 0.15 + i * 0.1) == 0
    assert a.full
    assert a.limit(0, 2.1) == 1  # the window passed: one probe
    a.took(1)
    a.placed()  # it found room: that is news, its claims double
    assert a.limit(0, 2.2) == 2
