"""A job's output and user-controlled names cannot drive the terminal: `tcl logs` keeps SGR
colours and drops every other control sequence (``--raw`` passes them); `tcl ps` and `tcl matrix
status|ls` show names, commands, hosts and errors literally (no rich markup, no escapes)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tcl.cli import _common as cli_common
from tcl.cli.app import app
from tcl.cli.matrix_show import cmd_ls, cmd_status
from tcl.cli.termsafe import plain, terminal_text
from tcl.control.logcache import LogCache
from tcl.control.runrequest import RunRequest
from tcl.control.states import RunState
from tcl.control.store import Store
from tcl.control.sweep.model import EntryState
from tcl.control.sweep.queue import NewEntry, SweepQueue
from tcl.runner.api import Event, EventKind, LogStream
from tests.unit.control.test_cli import home

__all__ = ["home"]  # the CLI tests' fixture: HOME, state dir, no config, no colour

runner = CliRunner()

OSC8 = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"  # a hyperlink
OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # writes the clipboard
CURSOR = "\x1b[2A\x1b[2K\x1b[1;1H\x1b7\x1b8"  # up two lines, erase, home, save/restore
CR_SPOOF = "Error: disk full\r[tcl] run x succeeded (exit code 0)\n"
RED = "\x1b[31mred\x1b[0m"


def test_terminal_text_keeps_sgr_and_drops_the_rest() -> None:
    assert terminal_text(f"a {OSC8} b\n") == "a click b\n"
    assert terminal_text(f"x{OSC52}y\n") == "xy\n"
    assert terminal_text(f"{CURSOR}z\n") == "z\n"
    # a bare carriage return would overwrite what the line said: each part is shown on its own
    assert terminal_text(CR_SPOOF) == "Error: disk full\n[tcl] run x succeeded (exit code 0)\n"
    assert terminal_text("dos line\r\n") == "dos line\n"
    # colours stay, and the attributes are reset after the chunk (no concealed `[tcl]` line)
    assert terminal_text(f"{RED} ok\n") == f"{RED} ok\x1b[0m\n"
    assert terminal_text("\x1b[8mhidden") == "\x1b[8mhidden\x1b[0m"
    # private-mode "SGR" lookalikes (xterm key modes) and 8-bit C1 controls are not colours
    assert terminal_text("\x1b[>4;2mk\x9b2J\x07\x08\n") == "k2J\n"
    # an unterminated string sequence swallows the rest of the chunk, as a terminal would
    assert terminal_text("before\x1b]0;title without end\n") == "before"
    assert terminal_text("tab\tkept\n") == "tab\tkept\n"
    assert plain(f"[reverse]{RED}\n{OSC52}x\ty") == "[reverse]red x y"


def _seed(home: Path, name: str, argv: list[str], data: list[str]) -> str:
    (home / "state" / "logs").mkdir(parents=True, exist_ok=True)
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    run_id = "evil-aaaaaa"
    store.create_run(run_id, name, RunRequest(argv=argv, chips=1, chip="[blink]h100[/]"))
    store.set_state(run_id, RunState.PROVISIONING)
    store.set_placement(run_id, "[reverse]host[/]", "ssh", "0" * 64)
    store.add_attempt(run_id, "[reverse]host[/]", "ssh", {"task_id": "t", "runner_port": 1})
    store.set_state(run_id, RunState.RUNNING)
    store.set_state(run_id, RunState.FAILED, exit_code=3)
    store.close()
    t0 = time.time() - 60
    LogCache(run_id, home / "state" / "logs").append(
        [
            Event(seq=i + 1, ts=t0 + i, kind=EventKind.LOG, stream=LogStream.STDOUT, data=d)
            for i, d in enumerate(data)
        ]
    )
    return run_id


def test_logs_strip_control_sequences_unless_raw(home: Path) -> None:
    data = [f"a {OSC8}\n", f"{OSC52}{CURSOR}b\n", f"{RED}\n", CR_SPOOF]
    _seed(home, "evil", ["true"], data)
    res = runner.invoke(app, ["logs", "evil"])
    assert res.exit_code == 0, res.output
    assert res.stdout == (
        f"a click\nb\n{RED}\x1b[0m\nError: disk full\n[tcl] run x succeeded (exit code 0)\n"
    )
    res = runner.invoke(app, ["logs", "evil", "--raw"])
    assert res.exit_code == 0, res.output
    assert res.stdout == "".join(data)


def test_ps_shows_names_commands_and_hosts_literally(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a wide terminal, so no cell is wrapped (without one, as in an xdist worker, rich takes 80)
    monkeypatch.setattr(cli_common.out.console, "_width", 200)
    _seed(home, "[reverse]x[/]", ["python", "[bold]t.py[/]", f"{OSC52}arg"], [])
    res = runner.invoke(app, ["ps", "-a"])
    assert res.exit_code == 0, res.output
    assert "[reverse]x[/]" in res.stdout
    assert "python '[bold]t.py[/]' 'arg'" in res.stdout  # shell-quoted, the OSC 52 dropped
    assert "[reverse]host[/]" in res.stdout and "[blink]h100[/]" in res.stdout
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout


def test_matrix_status_and_ls_show_names_and_errors_literally(home: Path) -> None:
    matrix_app = typer.Typer()
    matrix_app.command("status")(cmd_status)
    matrix_app.command("ls")(cmd_ls)
    (home / "state").mkdir(exist_ok=True)
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    q = SweepQueue(store)
    q.add("[reverse]m[/]", {"argv": ["true"]}, [NewEntry("[blink]j[/]", {})])
    [entry] = q.claim("s", limit=1, lease_s=600, matrices=["[reverse]m[/]"])
    assert q.started("s", entry.id)
    assert q.finish("s", entry.id, EntryState.FAILED, f"boom :skull: [red]x[/]{OSC52}\x1b[2A")
    q.close()
    store.close()
    res = runner.invoke(matrix_app, ["status"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0] == "[reverse]m[/]: 1 entries"
    assert "    [blink]j[/]  boom :skull: [red]x[/]" in res.stdout.splitlines()
    assert "\x1b" not in res.stdout
    res = runner.invoke(matrix_app, ["ls"])
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[1].startswith("[reverse]m[/] ")
