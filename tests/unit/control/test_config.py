"""Config: the seed schema validates; every error names the key path and the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcl.control.config import LocalHost, SshHost, load_config, parse_config
from tcl.control.errors import ConfigError

SEED = """\
clusters:
  hpc:
    root: /mnt/data/tcl
    work: /scratch/tcl
    log: /scratch/tcl/logs
hosts:
  login1:
    type: slurm
    ssh: login1
    cluster: hpc
    partitions:
      - name: gpu
        default: true
  workstation:
    type: plain
    ssh: ws
    cluster: hpc
    chips:
      h100: 8
  box:
    type: ssh
    ssh: 127.0.0.1
    port: 2222
priority: [workstation, login1]
gres_mapping:
  h100: gpu:h100
"""


def test_seed_schema_parses_and_orders_hosts() -> None:
    cfg = parse_config(SEED)
    ws = cfg.hosts["workstation"]
    assert isinstance(ws, SshHost) and ws.chips == {"h100": 8} and ws.type == "plain"
    assert cfg.ordered_hosts() == ["workstation", "login1", "box"]
    assert cfg.gres_mapping["h100"] == "gpu:h100"


def test_typo_key_names_path_and_line() -> None:
    bad = SEED.replace("    chips:\n      h100: 8", "    chipz:\n      h100: 8")
    with pytest.raises(ConfigError) as e:
        parse_config(bad, "cfg.yaml")
    assert "cfg.yaml:18: hosts.workstation.chipz: unknown key" in str(e.value)


def test_wrong_type_names_path_and_line() -> None:
    bad = SEED.replace("port: 2222", "port: twenty")
    with pytest.raises(ConfigError) as e:
        parse_config(bad, "cfg.yaml")
    assert "cfg.yaml:23: hosts.box.port:" in str(e.value)
    assert "'twenty'" in str(e.value)


def test_nested_list_error_line() -> None:
    bad = SEED.replace("        default: true", "        default: maybe")
    with pytest.raises(ConfigError) as e:
        parse_config(bad, "cfg.yaml")
    assert "cfg.yaml:13: hosts.login1.partitions.0.default:" in str(e.value)


def test_unknown_reference_and_host_type() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(SEED.replace("priority: [workstation, login1]", "priority: [ws9]"), "c")
    assert "c:24: priority.0: unknown host 'ws9'" in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_config(SEED.replace("type: ssh", "type: sssh"), "c")
    assert "c:21: hosts.box: unknown host type 'sssh'" in str(e.value)


def test_yaml_syntax_error_has_line() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config("hosts:\n  a: [1, 2\n  b: 3\n", "c")
    assert str(e.value).startswith("c:")
    assert "invalid YAML" in str(e.value)


def test_no_config_means_one_local_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("TCL_CONFIG", raising=False)
    cfg = load_config()
    assert list(cfg.hosts) == ["local"]
    assert isinstance(cfg.hosts["local"], LocalHost)


def test_named_config_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TCL_CONFIG", str(tmp_path / "nope.yaml"))
    with pytest.raises(ConfigError, match="config file not found"):
        load_config()
    (tmp_path / "c.yaml").write_text(SEED)
    assert "box" in load_config(tmp_path / "c.yaml").hosts


def test_every_error_is_reported_at_once_references_too() -> None:
    """A bad reference showed only once every field was valid, and only the first one
    (issue 31): now each error is a line, in file order."""
    bad = """\
clusters: {pod: {}}
hosts:
  a: {type: ssh, ssh: x, prot: 22}
  b: {type: local, cluster: pdo}
  c: {type: local, chips: lots}
priority: [a, zz, yy]
"""
    with pytest.raises(ConfigError) as e:
        parse_config(bad, "c.yaml")
    assert str(e.value).splitlines() == [
        "c.yaml:3: hosts.a.prot: unknown key (typo?)",
        "c.yaml:4: hosts.b.cluster: unknown cluster 'pdo'",
        "c.yaml:5: hosts.c.chips: Input should be a valid dictionary (got 'lots')",
        "c.yaml:6: priority.1: unknown host 'zz'",
        "c.yaml:6: priority.2: unknown host 'yy'",
    ]


def test_the_seed_s_example_config_loads_as_it_is() -> None:
    """Seed 000's own example (tests/fixtures/seed000_config.yaml): `uv_groups` on a plain host
    was an unknown key, so the seed's config did not load."""
    text = (Path(__file__).parents[2] / "fixtures" / "seed000_config.yaml").read_text()
    cfg = parse_config(text)
    assert cfg.ordered_hosts() == ["login1", "workstation", "tpu-pod", "k8s-cluster"]
    assert cfg.hosts["workstation"].uv_groups == ["cuda12"]
    assert cfg.hosts["login1"].uv_groups == ["cuda13"]


def test_a_uv_group_that_is_no_name_is_an_error_with_its_line() -> None:
    text = SEED.replace("      h100: 8\n", "      h100: 8\n    uv_groups: ['cuda 12; rm']\n")
    with pytest.raises(ConfigError, match=r"<config>:\d+: hosts\.workstation\.uv_groups\.0"):
        parse_config(text)


def test_prefer_and_avoid_name_clusters_and_a_wrong_one_has_its_line() -> None:
    text = SEED + "prefer: [hpc]\navoid: [hcp, elsewhere]\n"
    with pytest.raises(ConfigError) as e:
        parse_config(text)
    lines = str(e.value).splitlines()
    assert any(ln.endswith("avoid.0: unknown cluster 'hcp' (clusters: hpc)") for ln in lines)
    assert any("avoid.1: unknown cluster 'elsewhere'" in ln for ln in lines), lines
    assert not any("prefer" in ln for ln in lines)
