"""The stored run request: a typed, versioned record that reads every request already stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tcl.control.errors import StoreError
from tcl.control.lifecycle.retry_policy import RetryPolicy
from tcl.control.lifecycle.submit import Submission, stored_request
from tcl.control.runrequest import RunRequest
from tcl.control.store import RunRow, Store
from tcl.runner.api import JobRef, SessionKind

# What ``stored_request`` wrote before the request was typed (captured from that code path: a
# tcl.jobs job with every option set). Rows like it are in users' stores and must keep loading.
STORED_BEFORE_V1: dict[str, Any] = {
    "argv": [],
    "chip": "h100",
    "chips": 8,
    "nodes": 2,
    "host": "gpu1",
    "image": "img:1",
    "env": {"A": "1"},
    "secret_names": ["AK", "TOK"],
    "job": "lm1b",
    "job_ref": {"key": "lm1b", "config_yaml": "steps: 10\n", "restore": None},
    "options": {"down": "true"},
    "job_cwd": "sub/dir",
    "max_duration_s": 3600.0,
    "retry": {
        "max_attempts": 3,
        "exit_codes": [137],
        "infra": True,
        "backoff_s": 10.0,
        "backoff_max_s": 600.0,
    },
    "session": None,
    "config_path": "/home/u/.config/tcl/config.yaml",
    "config_named": True,
}


def test_a_request_stored_before_it_was_typed_parses() -> None:
    r = RunRequest.model_validate(STORED_BEFORE_V1)
    assert r.version == 1
    assert r.job == "lm1b" and r.job_ref == JobRef(key="lm1b", config_yaml="steps: 10\n")
    assert r.retry == RetryPolicy(max_attempts=3, exit_codes=[137])
    assert (r.chip, r.chips, r.nodes, r.host, r.image) == ("h100", 8, 2, "gpu1", "img:1")
    assert r.env == {"A": "1"} and r.secret_names == ["AK", "TOK"]
    assert r.options == {"down": "true"} and r.job_cwd == "sub/dir"
    assert r.max_duration_s == 3600.0 and r.session is None
    assert r.config_path == "/home/u/.config/tcl/config.yaml" and r.config_named
    # written back, it holds the same keys and values, plus its version and the later keys'
    # defaults (the project environment, on)
    newer = {
        "version": 1,
        "uv_groups": [],
        "project_env": True,
        "clusters": [],
        "avoid_clusters": [],
        "submitter_base": {},
    }
    assert r.model_dump(mode="json") == {**STORED_BEFORE_V1, **newer}


def test_a_request_missing_newer_keys_parses_with_defaults() -> None:
    r = RunRequest.model_validate({"argv": ["python", "t.py"], "chips": 2})  # an early store's
    assert r == RunRequest(argv=["python", "t.py"], chips=2)
    assert r.version == 1 and r.chip is None and r.nodes == 0 and r.env == {}
    assert r.secret_names == [] and r.options == {} and r.job_cwd == ""
    assert r.job_ref is None and r.retry is None and r.session is None
    assert r.config_path is None and not r.config_named
    assert RunRequest.model_validate({}) == RunRequest()


def test_unknown_keys_are_ignored() -> None:
    r = RunRequest.model_validate({"argv": ["true"], "gone_in_a_later_tcl": {"x": 1}})
    assert r == RunRequest(argv=["true"])
    assert "gone_in_a_later_tcl" not in r.model_dump(mode="json")


def test_round_trip_through_json_keeps_every_field() -> None:
    sub = Submission(
        argv=["python", "t.py", "--lr", "0.1"],
        chip="h100",
        chips=2,
        env={"A": "1"},
        secrets={"TOK": "s3cr3t-value"},
        retry=RetryPolicy(max_attempts=2),
        session=None,
        config_path="/c.yaml",
    )
    r = stored_request(sub, "sub")
    assert isinstance(r, RunRequest)
    dumped = r.model_dump(mode="json")
    assert dumped["version"] == 1 and dumped["secret_names"] == ["TOK"]
    assert "s3cr3t" not in str(dumped)  # secrets by name only
    assert RunRequest.model_validate(dumped) == r
    assert RunRequest.model_validate_json(r.model_dump_json()) == r


def test_the_store_writes_the_version_and_reads_a_typed_request(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    try:
        sent = RunRequest(argv=["true"], session=SessionKind.REMOTE, retry=RetryPolicy())
        assert store.create_run("new-run", "new", sent).request == sent
        assert store.get_run("new-run").request == sent
        with store.session() as s:
            s.add(
                RunRow(
                    id="old-run",
                    name="old",
                    state="pending",
                    request=STORED_BEFORE_V1,
                    created_at=0.0,
                    updated_at=0.0,
                )
            )
        with store.session() as s:
            row = s.get(RunRow, "new-run")
            assert row is not None and row.request["version"] == 1
            assert row.request["session"] == "remote"
        old = store.get_run("old-run").request
        assert old == RunRequest.model_validate(STORED_BEFORE_V1) and old.job == "lm1b"
    finally:
        store.close()


def test_command_text_is_argv_or_job_or_session() -> None:
    assert RunRequest(argv=["python", "t.py", "--lr", "0.1"]).command_text() == (
        "python t.py --lr 0.1"
    )
    assert RunRequest(argv=["bash", "-c", "echo hi"]).command_text() == "bash -c 'echo hi'"
    job = RunRequest(job="lm1b", job_ref=JobRef(key="lm1b"))
    assert job.command_text() == "job lm1b"
    assert RunRequest(session=SessionKind.JUPYTER).command_text() == "(jupyter session)"
    assert RunRequest(session=SessionKind.REMOTE).command_text() == "(remote session)"
    # argv wins over a job, a job over a session (as the runner runs them)
    assert RunRequest(argv=["x"], job="lm1b").command_text() == "x"
    assert RunRequest(job="lm1b", session=SessionKind.REMOTE).command_text() == "job lm1b"
    assert RunRequest().command_text() == ""


def test_a_request_of_the_wrong_type_names_its_run(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    try:
        with store.session() as s:
            bad = {"argv": ["true"], "chips": "eight"}
            s.add(
                RunRow(
                    id="bad-run",
                    name="",
                    state="pending",
                    request=bad,
                    created_at=0.0,
                    updated_at=0.0,
                )
            )
        with pytest.raises(
            StoreError, match=r"run bad-run: its stored request is unreadable \(chips"
        ):
            store.get_run("bad-run")
    finally:
        store.close()
