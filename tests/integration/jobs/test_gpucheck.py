"""scripts/gpu-check.sh on the CPU: the rows that need a GPU say so and are skipped, the others
run their real code at tiny sizes; the isolation row runs for real against a stand-in
``nvidia-smi`` (one or two "GPUs"), through a real shim, runners and jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpucheck.report import Outcome, parse

REPO = Path(__file__).resolve().parents[3]

STAND_IN = """#!{python}
import sys
GPUS = {gpus}
args = sys.argv[1:]
if args[:1] == ["--query-gpu=index,uuid,name,memory.total"]:
    for i in range(GPUS):
        print(f"{{i}}, GPU-0000000{{i}}-2222-3333-4444-555555555555, NVIDIA H200, 143771")
elif args[:1] == ["--query-gpu=index,pci.bus_id"]:
    for i in range(GPUS):
        print(f"{{i}}, 00000000:{{0x19 + i:02X}}:00.0")
elif args[:1] == ["--query-compute-apps=gpu_uuid,pid,used_memory"] or args == ["topo", "-m"]:
    pass
else:
    print("unexpected arguments", args, file=sys.stderr)
    sys.exit(9)
"""


def path_without_nvidia_smi() -> str:
    dirs = os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if not (Path(d) / "nvidia-smi").exists())


@pytest.mark.timeout(240)
def test_the_script_on_a_cpu_skips_the_gpu_rows_and_runs_the_rest(tmp_path: Path) -> None:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PATH": path_without_nvidia_smi()}
    env.pop("PYTHON", None)
    done = subprocess.run(
        ["bash", str(REPO / "scripts/gpu-check.sh"), "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=220,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["row"]: r for r in json.loads((tmp_path / "results.json").read_text())}
    assert list(rows) == ["inventory", "isolation", "checkpoint", "mfu", "batchsize"]
    for row in ("inventory", "isolation", "batchsize"):
        assert rows[row]["outcome"] == "skipped", rows[row]
        assert "no nvidia-smi" in rows[row]["summary"] or "no GPU" in rows[row]["summary"]
    ckpt, mfu = rows["checkpoint"]["figures"], rows["mfu"]["figures"]
    assert ckpt["device"].startswith("cpu") and ckpt["restored_on"] == ["cpu:0"]
    assert ckpt["save_gb_s"] > 0 and ckpt["load_gb_s"] > 0
    assert mfu["mfu"] is None and mfu["tokens_per_s"] > 0 and mfu["overhead_ratio"] > 0
    table = (tmp_path / "table.txt").read_text()
    assert table.splitlines()[0].split() == ["row", "outcome", "time", "result"]
    assert table in done.stdout


@pytest.mark.timeout(180)
@pytest.mark.parametrize("gpus", [1, 2])
def test_isolation_gives_each_task_its_own_gpu_through_a_real_shim(
    tmp_path: Path, gpus: int
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(STAND_IN.format(python=sys.executable, gpus=gpus))
    smi.chmod(0o755)
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PATH": f"{bin_dir}{os.pathsep}{path_without_nvidia_smi()}",
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-m", "bench.gpucheck.isolation"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    result = parse(done.stdout)
    assert result is not None, done.stdout + done.stderr
    tasks = result.figures["tasks"]
    if gpus == 1:
        assert [t["allocated"] for t in tasks] == [[0], []]
        assert [t["cuda_visible_devices"] for t in tasks] == ["0", ""]
    else:
        assert sorted(t["allocated"][0] for t in tasks) == [0, 1]
        assert sorted(t["cuda_visible_devices"] for t in tasks) == ["0", "1"]
    assert all(t["exit_code"] == 0 for t in tasks)
    assert result.figures["extra_refused"] is True  # every stand-in GPU was held
    # JAX on a CPU shows no GPU: the row reports it instead of passing
    assert result.outcome is Outcome.BELOW_GOAL
    assert any("JAX shows 0 GPUs, not 1" in w for w in result.figures["wrong"])
