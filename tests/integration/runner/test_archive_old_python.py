"""The link-chain tarball on the runner image's own interpreter (Debian's Python 3.11.2, which
has no tarfile ``data`` filter): plain ``extractall`` writes outside the working dir there, and
``tcl.runner.code.extract`` (the source tree mounted read-only; it needs only the standard
library) refuses the archive and leaves nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.testbed import REPO
from tests.unit.runner.test_code import link_chain, make_tar

SCRIPT = """
import json, sys, tarfile
from pathlib import Path
from tcl.runner.code import extract
from tcl.runner.errors import UnsafeArchive

x = Path("/x")
with tarfile.open(x / "c.tgz") as tar:  # the control: what tarfile alone does here
    tar.extractall(x / "plain" / "a" / "work")
try:
    extract(x / "c.tgz", x / "tcl" / "a" / "work")
    result = "extracted"
except UnsafeArchive as e:
    result = f"refused: {e}"
print(json.dumps({
    "version": sys.version.split()[0],
    "has_data_filter": hasattr(tarfile, "data_filter"),
    "result": result,
}))
"""


def test_link_chain_is_refused_by_the_runner_images_python(
    docker_client: Any, base_image: str, tmp_path: Path
) -> None:
    make_tar(tmp_path / "c.tgz", link_chain)
    for run in ("plain", "tcl"):
        (tmp_path / run / "outside").mkdir(parents=True)  # e2/outside/victim from a/work
        (tmp_path / run / "a" / "work").mkdir(parents=True)
    out = docker_client.containers.run(
        base_image,
        ["python3", "-c", SCRIPT],
        volumes={
            str(REPO / "tcl"): {"bind": "/src/tcl", "mode": "ro"},
            str(tmp_path): {"bind": "/x", "mode": "rw"},
        },
        environment={"PYTHONPATH": "/src", "PYTHONDONTWRITEBYTECODE": "1"},
        user=f"{os.getuid()}:{os.getgid()}",
        labels={"tcl.test": "runner"},
        remove=True,
    )
    report = json.loads(out.decode().strip().splitlines()[-1])
    # The interpreter is the vulnerable one, and the attack works on it: the test proves
    # something only while both hold.
    assert report["has_data_filter"] is False, report
    assert (tmp_path / "plain" / "outside" / "victim").read_bytes() == (
        b"written through the links"
    )
    assert report["result"].startswith("refused: link points outside"), report
    assert not (tmp_path / "tcl" / "outside" / "victim").exists()
    assert os.listdir(tmp_path / "tcl" / "a" / "work") == []
