"""Discovery through the nvidia-smi command line, with a stand-in ``nvidia-smi`` on PATH.

No GPU exists here: the stand-in prints the captured-format outputs from data/ for the exact
arguments the shim passes, so the subprocess path, the parsers and the busy-outside rule run
for real.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tcl.shim.api import ExecutorKind, TaskSpec
from tcl.shim.clusterfs import ClusterMounts
from tcl.shim.errors import NoCapacity
from tcl.shim.inventory import discover
from tcl.shim.reconcile import Reconciler
from tcl.shim.service import TaskService
from tcl.shim.store import TaskStore
from tests.unit.shim.fakes import FakeExecutor

DATA = Path(__file__).parent / "data"
STAND_IN = f"""#!{sys.executable}
import sys
args = sys.argv[1:]
data = {str(DATA)!r}
if args[:1] == ["--query-gpu=index,uuid,name,memory.total"]:
    print(open(data + "/gpu_query_h100x8.csv").read(), end="")
elif args[:1] == ["--query-compute-apps=gpu_uuid,pid,used_memory"]:
    print(open(data + "/apps_query.csv").read(), end="")
elif args == ["topo", "-m"]:
    print(open(data + "/topo_h100x8.txt").read(), end="")
else:
    print("unexpected arguments", args, file=sys.stderr)
    sys.exit(9)
"""


@pytest.fixture
def nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "nvidia-smi"
    exe.write_text(STAND_IN)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")


@pytest.fixture
async def service(tmp_path: Path, nvidia_smi: None) -> AsyncIterator[TaskService]:
    svc = TaskService(
        store=TaskStore(tmp_path / "state"),
        inventory=discover(None),
        executors={ExecutorKind.DOCKER: FakeExecutor()},
        default_executor=ExecutorKind.DOCKER,
        mounts=ClusterMounts(tmp_path / "state"),
    )
    rec = Reconciler(svc, interval_s=60)
    await rec.start()
    yield svc
    await rec.close()
    await svc.close()


def test_discover_runs_nvidia_smi(nvidia_smi: None) -> None:
    inv = discover(None)
    assert [a.chip for a in inv.accelerators] == ["h100"] * 8
    assert inv.topology.nvlink_groups == [frozenset(range(8))]


async def test_gpus_busy_outside_tcl_are_not_allocated(service: TaskService) -> None:
    # apps_query.csv: GPU 2 30 GiB used, GPU 5 84 MiB (< 100: free), GPU 6 unreadable (busy).
    assert service.busy_outside == {2, 6}
    host = service.host_info()
    assert [a.index for a in host.accelerators if a.busy_outside] == [2, 6]
    info = await service.submit(TaskSpec(id="t1", image="img", accelerators=3))
    assert info.accelerators == [0, 1, 3]
    with pytest.raises(NoCapacity) as e:
        await service.submit(TaskSpec(id="t2", image="img", accelerators=4))
    assert e.value.free == [4, 5, 7]
    with pytest.raises(NoCapacity):
        await service.submit(TaskSpec(id="t3", image="img", accelerators="all"))
