"""Entries from manifests, --grid and --where; argv templates and job configs per entry."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from tcl.control.errors import SweepError
from tcl.control.sweep.manifest import (
    check_template,
    fill_argv,
    grid,
    job_config,
    load_manifest,
    parse_value,
    template_fields,
    value_text,
    where,
)

# one entry of the seed's matrix.json, as its users write it
SEED_ENTRY: dict[str, Any] = {
    "job_id": "fft_spanish_cfgB_s42_main",
    "method": "fft",
    "lang": "spanish",
    "fleurs_code": "es_419",
    "whisper_lang": "spanish",
    "config_id": "B",
    "seed": 42,
    "asr_ratio": 0.5,
    "max_text_lines": 500000,
    "text_mtl_path": "/path/to/goldfish/spa_latn.txt",
    "output_dir": "/checkpoints/matrix_runs/fft_spanish_cfgB_s42_main",
    "run_kind": "main",
}


def _entry(job_id: str, **fields: Any) -> dict[str, Any]:
    return {**SEED_ENTRY, "job_id": job_id, "output_dir": f"/ckpt/{job_id}", **fields}


# load_manifest -----------------------------------------------------------------------------


def test_seed_matrix_json_loads_as_written(tmp_path: Path) -> None:
    entries = [
        _entry("fft_spanish_cfgB_s42_main"),
        _entry("vft_german_cfgA_s1_main", method="vft", lang="german", seed=1),
    ]
    path = tmp_path / "matrix.json"
    path.write_text(json.dumps(entries, indent=4))
    assert load_manifest(path) == entries
    assert load_manifest(str(path))[1]["seed"] == 1


def test_yaml_manifest(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump([{"job_id": "a", "lr": 0.1}, {"job_id": "b", "lr": 0.2}]))
    assert load_manifest(path) == [{"job_id": "a", "lr": 0.1}, {"job_id": "b", "lr": 0.2}]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"job_id": "a"}', "a manifest is a list of entries (objects), not a dict"),
        ("", "the manifest is empty"),
        ("null", "not a NoneType"),
        ('[{"job_id": "a"}, 3]', "entry 1 is not an object (a int)"),
        ('[{"job_id": "a"}, {"lr": 1}]', "entry 1 has no job_id (a non-empty string; got missing)"),
        ('[{"job_id": " "}]', "entry 0 has no job_id (a non-empty string; got ' ')"),
        ('[{"job_id": 7}]', "entry 0 has no job_id (a non-empty string; got 7)"),
        ('[{"job_id": "a"},', "not valid JSON"),
    ],
)
def test_bad_manifest_names_file_and_entry(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(SweepError) as e:
        load_manifest(path)
    assert str(e.value).startswith(f"{path}") and says in str(e.value)


def test_bad_yaml_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "m.yml"
    path.write_text("- job_id: a\n- job_id: [b\n")
    with pytest.raises(SweepError, match=r"m\.yml:\d+: not valid YAML"):
        load_manifest(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SweepError, match="cannot read the manifest"):
        load_manifest(tmp_path / "nope.json")


def test_duplicate_job_ids_are_all_named(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    ids = ["a", "b", "a", "c", "b", "d", "b"]
    path.write_text(json.dumps([{"job_id": i} for i in ids]))
    with pytest.raises(SweepError) as e:
        load_manifest(path)
    assert str(e.value) == f"{path}: 2 job_id(s) appear more than once (nothing added): a, b"


def test_many_duplicates_are_cut_after_ten(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"job_id": f"j{i}"} for i in range(13)] * 2))
    with pytest.raises(SweepError, match=r"13 job_id\(s\) .*: j0, j1, .*, j9 and 3 more$"):
        load_manifest(path)


# values and --grid -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        ("-3", -3),
        ("1e-3", 1e-3),
        ("0.5", 0.5),
        (".5", 0.5),
        ("3E4", 3e4),
        ("true", True),
        ("False", False),
        ("fft", "fft"),
        ("nan", "nan"),
        ("inf", "inf"),
        ("1_000", "1_000"),
        ("es_419", "es_419"),
        ("", ""),
    ],
)
def test_parse_value(text: str, value: Any) -> None:
    got = parse_value(text)
    assert got == value and type(got) is type(value)


def test_value_text() -> None:
    assert [value_text(v) for v in (1e-3, 3e-4, 1e-5, 2.0, 42, True, None, "a b", [1, 2])] == [
        "0.001",
        "0.0003",
        "1e-05",
        "2.0",
        "42",
        "true",
        "null",
        "a b",
        "[1,2]",
    ]


def test_grid_is_the_product_with_readable_ids() -> None:
    entries = grid(["lr=1e-3,3e-4", "seed=1,2,3"])
    assert len(entries) == 6
    assert entries[0] == {"job_id": "lr=0.001,seed=1", "lr": 0.001, "seed": 1}
    assert [e["job_id"] for e in entries] == [
        "lr=0.001,seed=1",
        "lr=0.001,seed=2",
        "lr=0.001,seed=3",
        "lr=0.0003,seed=1",
        "lr=0.0003,seed=2",
        "lr=0.0003,seed=3",
    ]
    assert grid(["lr=1e-3,3e-4", "seed=1,2,3"]) == entries  # stable
    assert grid(["method=fft", "on=true"]) == [
        {"job_id": "method=fft,on=true", "method": "fft", "on": True}
    ]
    assert grid([]) == []


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("lr", "--grid 'lr': expected KEY=V1,V2"),
        ("=1,2", "--grid '=1,2': expected KEY=V1,V2"),
        ("lr=", "--grid 'lr=': an empty value"),
        ("lr=1,,2", "--grid 'lr=1,,2': an empty value"),
        ("lr=1e-3,0.001", "--grid 'lr=1e-3,0.001': the same value twice: 0.001"),
        ("job_id=a,b", "--grid 'job_id=a,b': job_id is made from the other keys"),
    ],
)
def test_grid_errors_name_the_spec(spec: str, says: str) -> None:
    with pytest.raises(SweepError) as e:
        grid([spec, "seed=1"])
    assert says in str(e.value)


def test_grid_key_twice() -> None:
    with pytest.raises(SweepError, match="--grid 'lr=3': the key 'lr' is given twice"):
        grid(["lr=1,2", "seed=1", "lr=3"])


# --where -----------------------------------------------------------------------------------

ENTRIES = [
    {"job_id": "a", "method": "fft", "lr": 0.001, "seed": 1, "on": True},
    {"job_id": "b", "method": "vft", "lr": 0.0003, "seed": 2, "on": False},
    {"job_id": "c", "method": "fft", "lr": 0.0003, "seed": 3},
]


def _ids(entries: list[dict[str, Any]]) -> list[str]:
    return [e["job_id"] for e in entries]


def test_where() -> None:
    assert _ids(where(ENTRIES, ["method=fft"])) == ["a", "c"]
    assert _ids(where(ENTRIES, ["method=fft", "seed=3"])) == ["c"]  # AND
    assert _ids(where(ENTRIES, ["seed=1,2"])) == ["a", "b"]  # either
    assert _ids(where(ENTRIES, ["lr=3e-4"])) == ["b", "c"]  # compared as the value's text
    assert _ids(where(ENTRIES, ["on=true"])) == ["a"]  # c has no `on`: dropped
    assert _ids(where(ENTRIES, [])) == ["a", "b", "c"]
    assert where([], ["method=fft"]) == []


def test_where_errors() -> None:
    with pytest.raises(SweepError, match="--where 'metod=fft': no entry has the field 'metod'"):
        where(ENTRIES, ["metod=fft"])
    with pytest.raises(SweepError, match="--where 'method': expected KEY=VALUE"):
        where(ENTRIES, ["method"])


# argv templates ----------------------------------------------------------------------------


def test_fill_argv_whole_elements_are_not_quoted() -> None:
    argv = ["python", "train.py", "--lang", "{lang}", "--out", "{output_dir}", "--id", "{job_id}"]
    fields = {"lang": "spanish es", "output_dir": "/c/x y"}
    assert fill_argv(argv, fields, "j1") == [
        "python",
        "train.py",
        "--lang",
        "spanish es",
        "--out",
        "/c/x y",
        "--id",
        "j1",
    ]


def test_fill_argv_quotes_inside_a_shell_string() -> None:
    template = ["bash", "-c", "python train.py --lr {lr} --name {name} --tag={job_id}"]
    fields = {"lr": 1e-3, "name": "it's; rm -rf ~"}
    argv = fill_argv(template, fields, "lr=0.001,seed=1")
    assert argv[:2] == ["bash", "-c"]
    assert shlex.split(argv[2]) == [
        "python",
        "train.py",
        "--lr",
        "0.001",
        "--name",
        "it's; rm -rf ~",
        "--tag=lr=0.001,seed=1",
    ]


def test_fill_argv_braces_specs_and_dotted_fields() -> None:
    fields = {"optim.lr": 1e-3, "on": True}
    assert fill_argv(["{{x}}", "{optim.lr:.0e}", "{on}", "-{on!r}"], fields, "j") == [
        "{x}",
        "1e-03",
        "true",
        "-True",
    ]


def test_fill_argv_errors() -> None:
    with pytest.raises(SweepError, match="entry 'j' has no field 'lr'"):
        fill_argv(["{lr}"], {}, "j")
    with pytest.raises(SweepError, match=r"argv element '--x=\{': "):
        fill_argv(["--x={"], {}, "j")
    with pytest.raises(SweepError, match="a placeholder needs a field name"):
        fill_argv(["{}"], {}, "j")


def test_template_fields() -> None:
    assert template_fields(["{a}", "x {b} {a}", "{{c}}", "{job_id}"]) == ["a", "b", "job_id"]


def test_check_template_names_fields_and_entries() -> None:
    entries = [{"job_id": f"j{i}", "lr": 1} for i in range(14)] + [{"job_id": "k", "seed": 1}]
    check_template(["{job_id}"], entries)
    with pytest.raises(SweepError) as e:
        check_template(["run", "--lr", "{lr}", "--seed={seed}", "{job_id}"], entries)
    assert str(e.value) == (
        "the command template names fields some entries lack (nothing added): "
        "'lr' (missing in 1 of 15: k); "
        "'seed' (missing in 14 of 15: j0, j1, j2, j3, j4, j5, j6, j7, j8, j9 and 4 more)"
    )


# job configs -------------------------------------------------------------------------------


def test_job_config_sets_fields_over_the_base() -> None:
    base = "optim:\n  lr: 0.1\n  b1: 0.9\nsteps: 100\n"
    out = yaml.safe_load(
        job_config(base, {"job_id": "x", "optim.lr": 1e-3, "seed": 2, "data.lang": "es"})
    )
    assert out == {
        "optim": {"lr": 1e-3, "b1": 0.9},
        "steps": 100,
        "seed": 2,
        "data": {"lang": "es"},
    }
    assert yaml.safe_load(job_config("", {"a": 1})) == {"a": 1}


def test_job_config_errors() -> None:
    with pytest.raises(SweepError, match="not a mapping"):
        job_config("- 1\n", {})
    with pytest.raises(SweepError, match="not valid YAML"):
        job_config("a: [\n", {})
