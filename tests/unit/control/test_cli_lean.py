"""The lean CLI: ``tcl`` mounts only the invoked command's module, ``tcl --version`` imports no
CLI library at all, and the command table names every command the modules register."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tcl.cli.app import COMMANDS, build
from tcl.cli.main import command_of


@pytest.mark.parametrize(
    ("args", "command"),
    [
        ([], None),
        (["--version"], None),
        (["--help"], None),
        (["--help", "ps"], None),
        (["ps"], "ps"),
        (["ps", "--help"], "ps"),
        (["-c", "cfg.yaml", "logs", "-f", "r1"], "logs"),
        (["--config", "ps", "submit", "--", "ps"], "submit"),  # the config's value is not it
        (["--config=x.yaml", "matrix", "add"], "matrix"),
        (["-c"], None),
    ],
)
def test_the_command_is_the_first_word_that_is_no_root_option(
    args: list[str], command: str | None
) -> None:
    assert command_of(args) == command


def test_the_handed_commands_are_commands_that_end_on_their_own() -> None:
    """What ``tcl`` hands to the daemon's fork server (tcl.cli.handoff): commands of the table,
    none that reads terminal keys or is the daemon itself."""
    from tcl.cli.main import HANDED

    assert set(COMMANDS) >= HANDED
    assert not HANDED & {"ssh", "repl", "sync", "ui", "serve"}


def _names(app: object) -> set[str]:
    import typer

    assert isinstance(app, typer.Typer)
    names = {c.name for c in app.registered_commands}
    names |= {
        g.name or (g.typer_instance.info.name if g.typer_instance else None)
        for g in app.registered_groups
    }
    return {n for n in names if isinstance(n, str)}


def test_the_table_names_every_command_and_each_builds_alone() -> None:
    assert _names(build()) == set(COMMANDS)
    for command in COMMANDS:
        assert command in _names(build(command)), command


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    res = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(res.stdout.splitlines()[-1]))


def test_version_imports_no_cli_library() -> None:
    loaded = _loaded_after(
        "import sys\nsys.argv = ['tcl', '--version']\nfrom tcl.cli.main import main\nmain()"
    )
    heavy = {m for m in loaded if m.split(".")[0] in {"typer", "click", "rich", "pydantic"}}
    assert heavy == set()
    assert not {m for m in loaded if m.startswith("tcl.cli.") and m != "tcl.cli.main"}


def test_a_command_imports_only_its_own_module() -> None:
    loaded = _loaded_after("from tcl.cli.app import build\nbuild('ps')")
    mounted = {m for m in loaded if m.startswith("tcl.cli.")} - {"tcl.cli.app", "tcl.cli._common"}
    # ps's own module and what it imports; no other command's
    others = {f"tcl.cli.{m}" for m in COMMANDS.values()} - {"tcl.cli.ps"}
    assert "tcl.cli.ps" in mounted
    assert mounted & others == set(), mounted & others


def test_a_submit_mounts_neither_rich_nor_asyncio_nor_a_listing() -> None:
    """A followed submit prints its first line before it needs rich (a terminal's spinner, a
    red error), asyncio (the in-process path) or any listing's models (``ps``, ``hosts``...)."""
    loaded = _loaded_after("from tcl.cli.app import build\nbuild('submit')")
    tops = {m.split(".")[0] for m in loaded}
    assert tops & {"rich", "asyncio", "sqlalchemy"} == set()
    listings = {"runlisting", "hostlisting", "metriclisting", "matrixlisting", "listingwire"}
    assert {m for m in loaded if m.rpartition(".")[2] in listings} == set()


def test_a_ps_the_daemon_answers_reads_only_the_listing_models() -> None:
    """`tcl ps` through the daemon: its listing's models and the daemon's client, none of the
    in-process path's store, asyncio or refresh."""
    loaded = _loaded_after(
        "from tcl.cli.app import build\nbuild('ps')\n"
        "import tcl.control.daemon.client, tcl.control.runlisting"
    )
    assert {m.split(".")[0] for m in loaded} & {"asyncio", "sqlalchemy", "rich"} == set()
    assert "tcl.control.lifecycle.refresh" not in loaded


def test_a_daemon_starts_without_the_libraries_only_some_runs_need() -> None:
    """`tcl serve` (started by a submit when none answers: on that submit's path) loads its
    app and controller, not OmegaConf (a matrix of tcl.jobs jobs), JAX, or a cluster's client
    library (the backend that needs one imports it)."""
    loaded = _loaded_after("from tcl.control.daemon import server, app")
    tops = {m.split(".")[0] for m in loaded}
    assert "fastapi" in tops  # the daemon's own app is loaded
    assert tops & {"omegaconf", "jax", "kubernetes", "google", "asyncssh"} == set()


def test_plain_lines_are_written_as_rich_writes_them_and_without_rich() -> None:
    lines = [("plain line",), ("a\rb\x07c\x08d", "e\x0bf\x0cg"), ("tab\there", "[red]kept[/]")]
    code = (
        "import sys\nfrom tcl.cli._common import err\n"
        f"for parts in {lines!r}:\n"
        "    err.print(*parts, markup=False)\n"
        "err.print('no end', markup=False, end='')\n"
        "print('rich' in sys.modules)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert res.stdout == "False\n"

    import io

    from rich.console import Console

    buf = io.StringIO()
    rich_err = Console(file=buf, highlight=False, soft_wrap=True, width=100_000)
    for parts in lines:
        rich_err.print(*parts, markup=False)
    rich_err.print("no end", markup=False, end="")
    assert res.stderr == buf.getvalue()


def test_text_not_said_to_be_plain_still_goes_through_rich(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tcl.cli._common import LazyConsole

    con = LazyConsole(stderr=True)
    con.print("[bold]styled[/bold] and plain")  # rich's markup: the tags are not shown
    con.print("[bold]kept[/bold]", markup=False)
    assert capsys.readouterr().err == "styled and plain\n[bold]kept[/bold]\n"
