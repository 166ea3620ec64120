"""End to end on the SLURM testbed: a `container: charliecloud` host runs the job's runner (and so
the job) inside the runner image, unpacked to a Charliecloud image directory and run with ch-run.

The image directory records the docker image id it was made from (``/ch/docker-image-id``, see
scripts/testbed/charliecloud-image.sh): a file only the image has, so the job printing it shows
it ran inside the container, not on the node.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.integration.slurm.test_e2e_slurm import Env, _config
from tests.testbed import SlurmCluster, charliecloud_image

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

# Only true inside the image: its Charliecloud metadata and tcl's copy of itself.
PROBE = (
    "import os, sys; "
    "mark = open('/ch/docker-image-id').read().strip() if os.path.exists('/ch/docker-image-id') "
    "else 'none'; "
    "print('image-marker', mark, os.path.isdir('/src/tcl'), sys.executable, flush=True)"
)


def _env(c: SlurmCluster, root: Path, extra: str) -> Env:
    home, repo = root / "home", root / "repo"
    home.mkdir()
    repo.mkdir()
    (repo / "README").write_text("charliecloud e2e\n")
    work = c.base / "jobs" / f"work-{uuid.uuid4().hex[:8]}"
    config = root / "config.yaml"
    config.write_text(_config(c, work, extra))
    return Env(home, config, repo, c)


def test_charliecloud_host_runs_the_job_in_the_image(
    slurm_cluster: SlurmCluster, runner_image: str, tmp_path: Path
) -> None:
    c = slurm_cluster
    tag = runner_image.split(":")[-1]
    image = charliecloud_image(runner_image, c.base.parent / "charliecloud" / f"runner-{tag}")
    image_id = (image / "ch" / "docker-image-id").read_text().strip()
    assert not Path("/ch/docker-image-id").exists()  # the marker is the image's alone
    extra = f"    container: charliecloud\n    container_image: {image}\n"
    e = _env(c, tmp_path, extra)
    proc = e.tcl("submit", "--chip", "h100", "-n", "4", "--", "python3", "-c", PROBE, timeout=240)
    out = proc.stdout + proc.stderr
    assert f"image-marker {image_id} True" in out, out
    (run,) = e.tcl_json("ps", "-a")
    assert run["state"] == "succeeded", run
    assert f"image-marker {image_id}" in e.tcl("logs", run["run_id"]).stdout
