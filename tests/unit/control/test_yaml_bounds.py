"""YAML alias bombs and oversized entries: a config or a manifest is refused quickly, in bounded
memory, with an error naming the file; anchors used as people use them still load.

The bombs load in a child process under a memory ceiling (a regression must not take the test
machine down with it): it reports how long the load took and how much its peak RSS grew.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tcl.control.config import parse_config
from tcl.control.errors import ConfigError, SweepError
from tcl.control.sweep.manifest import load_manifest


def _bomb(levels: int = 9, width: int = 10) -> str:
    """'Billion laughs': each level a list of ``width`` aliases of the one before."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels + 1):
        refs = ", ".join([f"*a{i - 1}"] * width)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\n"


BOMB_CONFIG = "hosts:\n  h:\n    type: local\n    env: *a9\n"
BOMB_MANIFEST_ENTRY = "- job_id: one\n  lr: *a9\n"

# run in a child: load, report seconds, RSS growth and the error
_CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    kind, path = sys.argv[1], sys.argv[2]
    from tcl.control.config import load_config_at
    from tcl.control.sweep.manifest import load_manifest
    from pathlib import Path
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    try:
        if kind == "config":
            load_config_at(Path(path), True)
        else:
            load_manifest(path)
        error = None
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    took = time.monotonic() - t0
    grew_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"error": error, "s": took, "grew_kib": grew_kib}))
    """
)


def _load_in_child(kind: str, path: Path) -> dict[str, object]:
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, kind, str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"loading the {kind} bomb ran for over 60 s")
    assert proc.returncode == 0, f"the child died: {proc.returncode} {proc.stderr[-2000:]}"
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize(
    ("kind", "name", "body", "error"),
    [
        ("config", "config.yaml", BOMB_CONFIG, "ConfigError"),
        ("manifest", "m.yaml", BOMB_MANIFEST_ENTRY, "SweepError"),
    ],
)
def test_an_alias_bomb_is_refused_quickly_in_bounded_memory(
    kind: str, name: str, body: str, error: str, tmp_path: Path
) -> None:
    path = tmp_path / name
    text = _bomb() + body
    if kind == "manifest":  # a manifest is a list: the anchors sit in an entry of their own
        text = "- job_id: anchors\n" + textwrap.indent(_bomb(), "  ") + body
    path.write_text(text)
    res = _load_in_child(kind, path)
    assert isinstance(res["error"], str) and res["error"].startswith(error), res
    assert str(path) in res["error"] and "alias" in res["error"], res
    assert isinstance(res["s"], float) and res["s"] < 1.0, res  # the bound
    assert isinstance(res["grew_kib"], int) and res["grew_kib"] < 100 * 1024, res


def test_aliases_are_bounded_not_banned(tmp_path: Path) -> None:
    """A recursive alias is refused; anchors and merge keys as people use them still load."""
    m = tmp_path / "m.yaml"
    m.write_text("- &e {job_id: one, self: *e}\n")
    with pytest.raises(SweepError, match=rf"{m}:1: .*recursive alias"):
        load_manifest(m)
    with pytest.raises(ConfigError, match=r"c\.yaml:1: .*recursive alias"):
        parse_config("hosts: &h {a: *h}\n", "c.yaml")
    text = textwrap.dedent(
        """
        hosts:
          a: &ssh {type: ssh, ssh: gpu1, user: me, chips: {h100: 8}}
          b: {<<: *ssh, ssh: gpu2}
          c: *ssh
        """
    )
    cfg = parse_config(text, "c.yaml")
    assert cfg.hosts["c"] == cfg.hosts["a"]
    assert cfg.hosts["b"].model_dump() == {**cfg.hosts["a"].model_dump(), "ssh": "gpu2"}


def test_a_manifest_entry_over_64_kib_is_refused(tmp_path: Path) -> None:
    m = tmp_path / "m.json"
    m.write_text(
        json.dumps([{"job_id": "ok", "x": "a" * 1000}, {"job_id": "big", "x": "a" * (64 * 1024)}])
    )
    with pytest.raises(SweepError, match=rf"{m}: entry 1 \('big'\) is .* over the 64 KiB"):
        load_manifest(m)
    m.write_text(json.dumps([{"job_id": "ok", "x": "a" * 60_000}]))
    assert load_manifest(m)[0]["x"] == "a" * 60_000


def test_deep_nesting_is_an_error_not_a_crash(tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text("- job_id: one\n  x: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(SweepError, match=rf"{m}: "):
        load_manifest(m)
