"""A matrix entry's values never run as shell: hostile manifest values against every template form.

Each value tries to create a file ``X`` in a fresh folder; the filled command runs there for
real (bash), and ``X`` must never appear: the template is refused, or the value arrives as data.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tcl.cli.app import app
from tcl.control.errors import SweepError
from tcl.control.sweep.manifest import check_template, fill_argv
from tcl.control.sweep.model import Entry, EntryState
from tcl.control.sweep.spec import MatrixSpec
from tcl.control.sweep.submission import submission

HOSTILE = [
    "$(touch X)",
    "`touch X`",
    "'; touch X; '",
    '"; touch X; "',
    "'\"$(touch X)\"'",
    "\\'; touch X; #",
    "a\ntouch X\n",
    "$((`touch X`))",
    "x'$(touch X)'y",
]


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=30)
    return proc.stdout


def _entry(fields: dict[str, Any], job_id: str = "j1") -> Entry:
    now = time.time()
    return Entry(
        id=1,
        matrix="m",
        job_id=job_id,
        fields=fields,
        state=EntryState.CLAIMED,
        priority=0,
        not_before=now,
        lease_owner="me",
        lease_expires=now + 30,
        claims=1,
        run_id=None,
        last_error="",
        created_at=now,
        started_at=None,
        ended_at=None,
    )


# a placeholder inside quotes in a shell string (or as a shell's whole script): refused, naming
# the placeholder and the safe forms


QUOTED = [
    ["bash", "-c", "echo '{x}'"],
    ["bash", "-c", 'echo "{x}"'],
    ["bash", "-c", "echo `echo {x}`"],
    ["bash", "-c", "echo ${{v:-{x}}}"],
    ["bash", "-c", "echo $(( {x} ))"],
    ["bash", "-c", "echo \\{x}"],
    ["bash", "-c", "echo ${x}"],
    ["bash", "-c", "echo hi # {x}"],
    ["bash", "-c", "cat <<EOF\n{x}\nEOF"],
    ["bash", "-c", "echo $'{x}'"],
    ["--msg='{x}'"],
    ["bash", "-c", "{x}"],  # the value would be the script itself
    ["env", "A=1", "/bin/sh", "-ec", "{x}"],
]


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("template", QUOTED, ids=lambda t: t[-1])
def test_a_placeholder_in_a_quoted_shell_string_is_refused(
    template: list[str], value: str, tmp_path: Path
) -> None:
    try:
        argv = fill_argv(template, {"x": value}, "j1")
    except SweepError as e:
        text = str(e)
        assert "{x}" in text and "TCL_FIELD_X" in text and '"$1"' in text, text
    else:
        if argv[0] == "bash":
            _run(argv, tmp_path)
        assert not (tmp_path / "X").exists(), f"{argv} ran the value as shell"
        pytest.fail(f"{template} was filled: {argv}")
    assert not (tmp_path / "X").exists()
    with pytest.raises(SweepError, match=r"\{x\}"):
        check_template(template, [{"job_id": "j1", "x": value}])


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_are_inert_in_every_accepted_form(value: str, tmp_path: Path) -> None:
    fields = {"x": value}
    env = {"PATH": "/usr/bin:/bin", **submission(_spec(["true"]), _entry(fields)).env}
    forms = [
        (["printf", "%s", "{x}"], None),  # a bare argv word
        (["bash", "-c", 'printf %s "$1"', "_", "{x}"], None),  # a positional parameter
        (["bash", "-c", "printf %s {x}"], None),  # unquoted in the command string
        (["bash", "-c", "printf %s $(printf %s {x})"], None),  # unquoted in $(...)
        (["bash", "-c", 'printf %s "$TCL_FIELD_X"'], env),  # the environment
    ]
    for template, run_env in forms:
        check_template(template, [{"job_id": "j1", **fields}])
        out = _run(fill_argv(template, fields, "j1"), tmp_path, run_env)
        if "$(printf" not in template[-1]:  # a substitution's word splitting eats newlines
            assert out == value, (template, out)
    assert not (tmp_path / "X").exists()


def _spec(argv: list[str]) -> MatrixSpec:
    return MatrixSpec(argv=argv, code_sha256="0" * 64, config_path="/c.yaml")


def test_every_field_is_in_the_runs_environment() -> None:
    fields = {"lr": 1e-3, "optim.beta-2": 0.99, "name": "$(touch X)", "on": True, "l": [1, 2]}
    sub = submission(_spec(["python", "t.py"]), _entry(fields, "lr=0.001"))
    assert sub.env["TCL_FIELD_LR"] == "0.001"
    assert sub.env["TCL_FIELD_OPTIM_BETA_2"] == "0.99"
    assert sub.env["TCL_FIELD_NAME"] == "$(touch X)"
    assert sub.env["TCL_FIELD_ON"] == "true" and sub.env["TCL_FIELD_L"] == "[1,2]"
    assert sub.env["TCL_MATRIX_JOB_ID"] == "lr=0.001"


def test_fields_that_share_an_environment_name_are_refused() -> None:
    from tcl.control.sweep.shellsafe import field_env

    with pytest.raises(SweepError, match=r"'a\.b' and 'a_b' are both TCL_FIELD_A_B"):
        field_env({"a.b": 1, "a_b": 2})


def test_tcl_matrix_add_refuses_a_quoted_placeholder(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("TCL_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps([{"job_id": "a", "x": "$(touch X)"}]))
    res = CliRunner().invoke(
        app,
        [
            "matrix",
            "add",
            str(manifest),
            "--name",
            "m",
            "--no-start",
            "--",
            "bash",
            "-c",
            "echo '{x}'",
        ],
    )
    assert res.exit_code != 0
    assert "{x}" in res.stderr and "TCL_FIELD_X" in res.stderr
