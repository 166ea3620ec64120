"""`tcl submit`'s flags as the request's values (shared with `tcl repl` and `tcl matrix add`):
``--env`` pairs, ``--secret`` values read from this shell, ``--job``/``--job-config`` as a job
reference, the backends' options."""

from __future__ import annotations

import os
from pathlib import Path

from tcl.cli._common import err, fail
from tcl.control.errors import TclError
from tcl.runner.api import JobRef


def pairs(values: list[str]) -> dict[str, str]:
    """``--env KEY=VALUE``, or ``--env KEY``: its value in this shell (as ``docker run -e``).
    Nothing else of the submitting shell reaches the job: a variable travels when named. Every
    bad one is reported at once."""
    env: dict[str, str] = {}
    bad: list[str] = []
    for v in values:
        key, sep, value = v.partition("=")
        if not key or not (sep or key.isidentifier()):
            bad.append(f"--env {v!r}: expected KEY=VALUE, or KEY to pass this shell's value")
        elif not sep and key not in os.environ:
            bad.append(f"--env {key}: not set in this shell's environment (give {key}=VALUE)")
        else:
            env[key] = value if sep else os.environ[key]
    if bad:
        raise fail("\n".join(bad))
    return env


def secrets_of(names: list[str]) -> dict[str, str]:
    found = {}
    for name in names:
        if name not in os.environ:
            raise fail(f"--secret {name}: not set in this shell's environment")
        found[name] = os.environ[name]
    return found


def job_reference(
    key: str | None, config_path: str | None, command: list[str], restore: str | None = None
) -> JobRef | None:
    """``--job KEY [--job-config FILE] [--restore PATH]``: the config travels as data in the
    spec, and the runner starts ``python -m tcl.jobs.launch`` with it (resuming from the run's
    checkpoints, else from ``--restore``). ``--job-config`` alone: the key is its ``job:``."""
    text = ""
    if config_path is not None:
        try:
            with open(config_path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise fail(f"--job-config {config_path}: {e.strerror or e}") from None
        named = _named_job(config_path, text)
        if key is None and named is None:
            raise fail(f"--job-config {config_path} names no `job:`: give --job KEY")
        if key is not None and named is not None and named != key:
            raise fail(f"--job {key} but --job-config {config_path} names job: {named}")
        key = key or named
    if key is None:
        if restore is not None:
            raise fail("--restore needs --job KEY")
        return None
    if command:
        raise fail("--job runs the job's launcher: give either --job or a COMMAND, not both")
    return JobRef(key=key, config_yaml=text, restore=restore)


def _named_job(path: str, text: str) -> str | None:
    """The ``job:`` a job config names at its top (what ``tcl.jobs.launch`` reads too)."""
    from tcl.control import yamlsafe

    try:
        data = yamlsafe.construct(yamlsafe.compose(text))
    except Exception as e:  # yaml's errors: the launcher reports them with their line
        raise fail(f"--job-config {path}: not YAML: {e}") from None
    job = data.get("job") if isinstance(data, dict) else None
    return job if isinstance(job, str) and job else None


def backend_options(
    down: bool, tpu_version: str | None, tpu_spot: bool | None, tpu_preemptible: bool | None
) -> dict[str, str]:
    """Backend options as the backends read them (``tcl.control.backends.tpu.backend``)."""
    opts = {"down": "1"} if down else {}
    if tpu_version:
        opts["tpu.version"] = tpu_version
    if tpu_spot is not None:
        opts["tpu.spot"] = "true" if tpu_spot else "false"
    if tpu_preemptible is not None:
        opts["tpu.preemptible"] = "true" if tpu_preemptible else "false"
    return opts


def volcano_options(image: str | None, namespace: str | None) -> dict[str, str]:
    """As ``tcl.control.backends.volcano.backend`` reads them (``OPT_IMAGE``, ``OPT_NAMESPACE``)."""
    opts = {"volcano.image": image} if image else {}
    if namespace:
        opts["volcano.namespace"] = namespace
    return opts


def check_job(key: str, code_dir: str | None) -> None:
    """Refuse an unknown ``--job`` key before anything ships (here: the user's environment),
    against the jobs of the project being shipped (``tcl.control.jobcheck``)."""
    from tcl.control.jobcheck import check_job_key, job_dirs

    start, stop = job_dirs(Path.cwd(), Path(code_dir) if code_dir is not None else None)
    try:
        note = check_job_key(key, start, stop)
    except TclError as e:
        raise fail(str(e), e.exit_code) from None
    if note:
        err.print(f"note: {note}", markup=False)
