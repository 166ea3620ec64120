"""The SLURM backend's pure parts: the batch script generator and the sinfo/squeue parsers."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from tcl.control.backends.slurm import parse
from tcl.control.backends.slurm.script import BatchScript, render, slurm_time, wrap_argv
from tcl.control.errors import TclError

SINFO = """\
node1|gpu*|gpu:h100:4|gpu:h100:2(IDX:0-1)|mixed|
node1|preempt|gpu:h100:4|gpu:h100:2(IDX:0-1)|mixed|
node2|gpu*|gpu:h100:4|gpu:h100:0(IDX:N/A)|idle|
node2|preempt|gpu:h100:4|gpu:h100:0(IDX:N/A)|idle|
node3|gpu*|gpu:h100:4(S:0-1)|gpu:h100:0|drained|
"""


def _script(**kw: object) -> BatchScript:
    base: dict[str, object] = dict(
        job_name="tcl-run-1",
        nodes=2,
        partition="gpu",
        gres="gpu:h100:4",
        run_dir="/w/r",
        spec="/w/r/spec.json",
        code="/w/c.tar.gz",
        runner=["/w/venv/bin/tcl-runner"],
        time_s=3600,
        work="/w",
    )
    base.update(kw)
    return BatchScript(**base)  # type: ignore[arg-type]


def _sbatch_lines(text: str) -> list[list[str]]:
    return [
        shlex.split(line[len("#SBATCH ") :])
        for line in text.splitlines()
        if line.startswith("#SBATCH ")
    ]


def test_script_options_and_body() -> None:
    text = render(_script(account="acc", qos="q", mem="64G", exclude=("node3",)))
    opts = [w for words in _sbatch_lines(text) for w in words]
    for want in (
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gres=gpu:h100:4",
        "--partition=gpu",
        "--time=0-01:00:00",
        "--requeue",
        "--open-mode=append",
        "--signal=USR1@120",
        "--account=acc",
        "--qos=q",
        "--mem=64G",
        "--exclude=node3",
        "--output=/w/r/slurm-%j.out",
    ):
        assert want in opts, (want, opts)
    assert "SLURM_JOB_ID % 4096 + 61440" in text and "NodeAddr" in text
    assert '"/w/r/a${SLURM_RESTART_COUNT:-0}"' in text
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)


def test_a_malicious_partition_stays_one_word() -> None:
    evil = "gpu --wrap='rm -rf /' $(reboot) `x`;"
    text = render(_script(partition=evil, run_dir="/w/it's $HOME"))
    words = _sbatch_lines(text)
    assert [f"--partition={evil}"] in words
    assert "$(reboot)" not in text.replace(shlex.quote(f"--partition={evil}"), "")
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    with pytest.raises(TclError, match="one line"):
        render(_script(partition="gpu\n#SBATCH --wrap x"))


def test_wrap_argv() -> None:
    argv = ["tcl-runner", "batch"]
    assert wrap_argv("none", None, argv, []) == ([], argv)
    assert wrap_argv("charliecloud", "/img", argv, [("/w", "/mnt")]) == (
        [],
        ["ch-run", "-b", "/w:/mnt", "/img", "--", *argv],
    )
    opts, task = wrap_argv("pyxis", "nvcr.io/x:1", argv, [("/w", "/w")])
    assert opts == ["--container-image=nvcr.io/x:1", "--container-mounts=/w:/w"] and task == argv
    assert wrap_argv("apptainer", "x.sif", argv, [])[1][:3] == ["apptainer", "exec", "x.sif"]
    text = render(_script(container="charliecloud", container_image="/img"))
    assert "ch-run -b /w:/mnt /img -- /w/venv/bin/tcl-runner batch --code /mnt/c.tar.gz" in text


def test_slurm_time() -> None:
    assert slurm_time(1) == "0-00:01:00"
    assert slurm_time(90061) == "1-01:02:00"


def test_parse_sinfo_and_place() -> None:
    rows = parse.parse_sinfo(SINFO)
    assert rows[0].default and rows[0].free("gpu:h100") == 2 and not rows[4].usable
    assert parse.parse_gres("gpu:h100:4(S:0-1),gpu:a100:2") == {"gpu:h100": 4, "gpu:a100": 2}
    now = parse.place(rows, "h100", 4, 0, {}, [], [])
    assert isinstance(now, parse.Placed) and now.starts_now and now.partition == "gpu"
    queued = parse.place(rows, "h100", 8, 0, {}, ["gpu"], [])
    assert isinstance(queued, parse.Placed) and not queued.starts_now and queued.nodes == 2
    assert queued.reason == "Resources: 6 of 8 h100 free in gpu"
    bad = parse.place(rows, "h100", 1, 0, {}, ["nope"], [])
    assert bad == "partition nope not on this cluster (it has: gpu, preempt)"
    gres = parse.place(rows, "a100", 1, 0, {}, [], [])
    assert isinstance(gres, str) and "gpu:a100" in gres and "gpu:h100:4 per node" in gres
    mapped = parse.place(rows, "hopper", 1, 0, {"hopper": "gpu:h100"}, [], ["node2"])
    assert isinstance(mapped, parse.Placed) and mapped.starts_now
    # without node2 (excluded) only node1's 2 free h100 are left: 4 of them must queue
    excluded = parse.place(rows, "h100", 4, 0, {}, [], ["node2"])
    assert isinstance(excluded, parse.Placed) and not excluded.starts_now
    too_big = parse.place(rows, "h100", 12, 0, {}, [], [])
    assert isinstance(too_big, str)


def test_parse_squeue() -> None:
    rows = parse.parse_squeue("12|PENDING|Resources|0|(null)|\n13|RUNNING|None|1|node[1-2]|\n")
    assert rows["12"].state == "PENDING" and rows["12"].reason == "Resources"
    assert rows["13"].restarts == 1 and rows["13"].nodes == "node[1-2]"
    assert parse.ended_state("CANCELLED").value == "terminated"
    assert parse.ended_state("TIMEOUT").value == "failed"


def test_a_session_serves_its_api_and_its_token_is_in_the_spec_file_only() -> None:
    import json

    from tcl.control.backends.slurm import session
    from tcl.control.backends.slurm.backend import spec_line
    from tcl.runner.api import JobSpec, SessionKind, SessionSpec
    from tcl.runner.batch import TOKEN_KEY

    text = render(_script(serve=session.SERVE_ADDR))
    assert "--serve 0.0.0.0:0" in text
    assert "--serve" not in render(_script())
    job = JobSpec(run_id="r", session=SessionSpec(kind=SessionKind.JUPYTER))
    token = session.new_token()
    line = json.loads(spec_line(job, None, token))
    assert line[TOKEN_KEY] == token and line["session"]["kind"] == "jupyter"
    assert token not in text
    answer = '{"token": "t", "port": 4, "addr": "10.0.0.2"}\n'
    assert session.parse_answer(answer, "hpc") == ("t", 4, "10.0.0.2")
    with pytest.raises(TclError, match="hpc: its runner is not serving yet"):
        session.parse_answer('{"why": "its runner is not serving yet"}', "hpc")
