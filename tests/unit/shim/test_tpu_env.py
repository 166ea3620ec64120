"""What a task on TPU chips is told: the chips it holds and, on part of a host, libtpu's bounds."""

from __future__ import annotations

from pathlib import Path

from tcl.shim.api import Accelerator, NetworkMode, TaskSpec
from tcl.shim.executors.base import Launch, accelerator_env


def launch(
    indices: list[int], host_chips: int, vendor: str = "tpu", chip: str = "tpu-v4"
) -> Launch:
    accels = [Accelerator(index=i, chip=chip, vendor=vendor) for i in indices]
    return Launch(
        spec=TaskSpec(id="t1"),
        accelerators=accels,
        network=NetworkMode.HOST,
        task_dir=Path("/nonexistent"),
        host_vendor=vendor,
        host_accelerators=host_chips,
    )


def test_whole_host_gets_only_visible_chips() -> None:
    env = accelerator_env(launch([0, 1, 2, 3], 4))
    assert env == {"TCL_ACCELERATORS": "0,1,2,3", "TPU_VISIBLE_CHIPS": "0,1,2,3"}


def test_one_chip_of_four_is_a_one_process_slice() -> None:
    env = accelerator_env(launch([2], 4))
    assert env["TPU_VISIBLE_CHIPS"] == "2"
    assert env["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,1,1"
    assert env["TPU_PROCESS_BOUNDS"] == "1,1,1"
    assert "CUDA_VISIBLE_DEVICES" not in env


def test_two_tasks_on_one_host_get_their_own_process_port() -> None:
    a, b = accelerator_env(launch([0, 1], 4)), accelerator_env(launch([2, 3], 4))
    assert a["TPU_CHIPS_PER_PROCESS_BOUNDS"] == b["TPU_CHIPS_PER_PROCESS_BOUNDS"] == "1,2,1"
    assert a["TPU_PROCESS_PORT"] != b["TPU_PROCESS_PORT"]
    assert a["TPU_PROCESS_ADDRESSES"] == f"localhost:{a['TPU_PROCESS_PORT']}"


def test_odd_subset_gets_visible_chips_only() -> None:
    env = accelerator_env(launch([0, 1, 2], 8))
    assert env == {"TCL_ACCELERATORS": "0,1,2", "TPU_VISIBLE_CHIPS": "0,1,2"}


def test_fake_tpu_chips_are_told_as_tpu_chips_and_fake_gpus_as_gpus() -> None:
    env = accelerator_env(launch([1], 4, vendor="fake", chip="tpu-v4"))
    assert env["TPU_VISIBLE_CHIPS"] == "1" and "CUDA_VISIBLE_DEVICES" not in env
    env = accelerator_env(launch([1], 4, vendor="fake", chip="h100"))
    assert env == {"TCL_ACCELERATORS": "1", "CUDA_VISIBLE_DEVICES": "1"}


class _Container:
    id = "c1"
    attrs: dict[str, object] = {}

    def start(self) -> None: ...

    def reload(self) -> None: ...


class _Containers:
    def __init__(self) -> None:
        self.created: dict[str, object] = {}

    def create(self, image: str, **kwargs: object) -> _Container:
        self.created = kwargs
        return _Container()


class _Client:
    def __init__(self) -> None:
        self.containers = _Containers()

    def info(self) -> dict[str, object]:
        return {"Runtimes": {"runc": {}}}


def test_a_docker_task_gets_only_its_own_chip_devices(tmp_path: Path) -> None:
    from tcl.shim.executors.docker_executor import DockerExecutor

    dev = tmp_path / "dev"
    dev.mkdir()
    for i in range(4):
        (dev / f"accel{i}").touch()
    client = _Client()
    ex = DockerExecutor(client, None, "inst", 60.0, dev_dir=dev)
    task_dir = tmp_path / "task"
    task_dir.mkdir()
    base = launch([1, 2], 4)
    ex._start(Launch(**{**base.__dict__, "task_dir": task_dir}))
    created = client.containers.created
    assert created["devices"] == [f"{dev}/accel{i}:{dev}/accel{i}:rwm" for i in (1, 2)]
    env = created["environment"]
    assert isinstance(env, dict) and env["TPU_VISIBLE_CHIPS"] == "1,2"
