"""The shim's bound on what jobs derive from their code: JAX's compilation cache (least
recently used files past the budget) and the project environments (unused ones removed, never
one a job runs in: its launcher's lock travels with the job) (issues 33 and 30)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tcl.runner import projectenv
from tcl.shim.derivedgc import READY, DerivedGc
from tests.polling import wait_until
from tests.uvproject import make_project, uv_env

DAY = 24 * 3600.0


def _aged(path: Path, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    os.utime(path, (t, t))


def test_the_compilation_cache_keeps_its_newest_files_within_the_budget(tmp_path: Path) -> None:
    jax = tmp_path / "jax"
    jax.mkdir()
    for i, age in enumerate((5 * DAY, 3 * DAY, 2 * DAY, 60.0)):  # the last one: being written
        f = jax / f"entry{i}-cache"
        f.write_bytes(b"x" * 1000)
        _aged(f, age)
    gc = DerivedGc(jax, tmp_path / "envs", jax_max_bytes=2500)
    gone = gc.collect()
    assert sorted(p.name for p in gone) == ["entry0-cache", "entry1-cache"]  # oldest first
    assert sorted(p.name for p in jax.iterdir()) == ["entry2-cache", "entry3-cache"]
    assert gc.collect() == []  # within the budget now


def test_an_idle_environment_goes_and_one_a_job_runs_in_stays(tmp_path: Path) -> None:
    repo = make_project(tmp_path / "repo")
    envs = tmp_path / "envs"
    launcher = [sys.executable, "-I", "-S", projectenv.__file__, "--root", str(repo)]
    # a job in the environment: its launcher's lock is held by the job after exec
    job = subprocess.Popen(
        [*launcher, "--envs", str(envs), "--", "sleep", "60"],
        env=uv_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(lambda: any((p / READY).exists() for p in envs.glob("*")), 60, "the env")
        (env,) = [p for p in envs.iterdir() if p.is_dir()]
        wait_until(lambda: job.poll() is None and _execd(job.pid), 30, "the job's exec")
        _aged(env / READY, 30 * DAY)  # long unused, as far as its marker says
        gc = DerivedGc(tmp_path / "jax", envs, env_max_idle_s=DAY)
        assert gc.collect() == [] and env.is_dir()  # the job runs in it: kept
    finally:
        job.kill()
        job.wait(10)
    assert gc.collect() == [env] and not env.exists()  # the job ended: removed
    # the next job builds it again
    done = subprocess.run(
        [*launcher, "--envs", str(envs), "--", "python", "-c", "import tclprobe_dep"],
        env=uv_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and "(built in" in done.stdout, done


def _execd(pid: int) -> bool:
    """The launcher has become the job (its command line is `sleep 60`)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0")
    except OSError:
        return False


def test_a_recent_environment_is_kept_however_short_the_idle_limit(tmp_path: Path) -> None:
    env = tmp_path / "envs" / "k1"
    env.mkdir(parents=True)
    (env / READY).write_text("")
    _aged(env / READY, 60.0)  # used a minute ago: a job may be starting in it
    assert DerivedGc(tmp_path / "jax", tmp_path / "envs", env_max_idle_s=0).collect() == []
