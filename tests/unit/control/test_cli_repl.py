"""``tcl repl``'s Ctrl-C: from the moment its run exists, an interrupt stops a session that was
not ready yet (a queued SLURM job is cancelled, not left behind)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from tcl.cli import repl, submit
from tcl.cli.app import app
from tcl.control import syncing
from tests.unit.control.conftest import cli_home


def test_a_ctrl_c_while_the_sync_base_is_recorded_stops_the_new_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli_home(tmp_path, monkeypatch)
    stopped: list[str] = []
    monkeypatch.setattr(submit, "start_run", lambda req: SimpleNamespace(run_id="r-queued"))

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    def stop(ctx: object, run_ref: str) -> str:
        stopped.append(run_ref)
        return "stopped"

    monkeypatch.setattr(syncing, "begin", interrupted)
    monkeypatch.setattr(repl, "_stop", stop)
    res = CliRunner().invoke(app, ["repl", "--no-browser"])
    assert res.exit_code == 130, res.output
    assert stopped == ["r-queued"]
    assert "run r-queued stopped: cancelled while it waited" in res.stderr
