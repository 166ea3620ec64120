"""An entry's run as a :class:`Submission`: its matrix's spec filled with the entry's fields,
and its run's name."""

from __future__ import annotations

from tcl.control.lifecycle.submit import Submission
from tcl.control.sweep.manifest import fill_argv, job_config
from tcl.control.sweep.model import Entry
from tcl.control.sweep.shellsafe import field_env
from tcl.control.sweep.spec import MatrixSpec
from tcl.runner.api import JobRef


def submission(spec: MatrixSpec, entry: Entry) -> Submission:
    job = None
    argv: list[str] = []
    if spec.job is not None:
        job = JobRef(
            key=spec.job.key,
            config_yaml=job_config(spec.job.config_yaml, entry.fields),
            restore=spec.job.restore,
        )
    else:
        argv = fill_argv(spec.argv, entry.fields, entry.job_id)
    return Submission(
        argv=argv,
        name=run_name(entry),
        chip=spec.chip,
        chips=spec.chips,
        nodes=spec.nodes,
        host=spec.host,
        clusters=list(spec.clusters),
        avoid_clusters=list(spec.avoid_clusters),
        image=spec.image,
        env={
            **spec.env,
            **field_env(entry.fields),
            "TCL_MATRIX": entry.matrix,
            "TCL_MATRIX_JOB_ID": entry.job_id,
        },
        submitter_base=dict(spec.submitter_base),
        job=job,
        yes=True,
        job_cwd=spec.job_cwd,
        max_duration_s=spec.max_duration_s,
        retry=spec.retry,
    )


def run_name(entry: Entry) -> str:
    """``MATRIX.JOB_ID``: a ``tcl.jobs`` job's checkpoint folder too, so no ``/`` in it."""
    return f"{entry.matrix}.{entry.job_id}".replace("/", "-")[:256]
