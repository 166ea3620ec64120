"""The restart tax of a preempted JAX job on the local default (issue 33): a small ``tcl.jobs``
GPT (examples/tiny_gpt.yaml, longer) submitted with ``--retry``, preempted twice through the
local shim's ``/preemption`` (as a spot VM's notice would be); each resumed attempt restores its
checkpoint and finds its program in the host's JAX compilation cache.

    uv run python bench/restart_tax.py [--steps 3000]

Prints each attempt's time to first step by phase (``tcl ps --json``), then two ratios:

- **compile**: the resumed attempts' compile (``traced`` -> ``compiled``: XLA's compile, or its
  load from JAX's cache) over the first attempt's (cache hits; goal <= 0.2), and the same with
  the tracing and lowering before it (``state_ready`` -> ``compiled``), which no cache saves;
- **goodput**: the preempted run's goodput over the same job's uninterrupted goodput, run next
  on the same host (whose cache is then warm: a baseline that favours it; goal >= 0.9).

JAX caches only compiles over ``JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS`` (1 s by default);
this tiny model compiles in about that on 2 cores, so the bench sets it to 0 for both runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._controllib import REPO, TCL

CONFIG_EDITS = [
    ("report_interval: 25", "report_interval: 5"),
    ("validation_interval: 100", "validation_interval: 0"),
    ("checkpoint_interval: 100", "checkpoint_interval: 50"),
]


class Home:
    def __init__(self, root: Path, steps: int, grace_s: float) -> None:
        self.root = root
        self.grace_s = grace_s
        self.repo = root / "repo"
        self.repo.mkdir()
        subprocess.run(["git", "init", "-q", str(self.repo)], check=True)
        config = (REPO / "examples" / "tiny_gpt.yaml").read_text()
        for old, new in [*CONFIG_EDITS, ("total_steps: 600", f"total_steps: {steps}")]:
            assert old in config, old
            config = config.replace(old, new)
        (self.repo / "gpt.yaml").write_text(config)
        drop = ("TCL_CONFIG", "TCL_DB_URL", "TCL_SERVE")
        self.env = {k: v for k, v in os.environ.items() if k not in drop}
        self.env.update(HOME=str(root), TCL_STATE_DIR=str(root / "state"), NO_COLOR="1")

    def tcl(self, *args: str) -> str:
        res = subprocess.run(
            [TCL, *args], env=self.env, cwd=self.repo, capture_output=True, text=True, timeout=600
        )
        if res.returncode != 0:
            raise SystemExit(f"tcl {' '.join(args)} failed: {res.stderr[-2000:]}")
        return res.stdout

    def submit(self, name: str) -> str:
        out = self.tcl(
            "submit",
            "-d",
            "--json",
            "--name",
            name,
            "--retry",
            "3",
            "--job",
            "gpt/train",
            "--job-config",
            "gpt.yaml",
            "--env",
            f"TCL_OUT_DIR={self.root / name}",
            "--env",
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0",
        )
        run_id: str = json.loads(out)["run_id"]
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        runs: list[dict[str, Any]] = json.loads(self.tcl("ps", "-a", "--json"))
        (run,) = [r for r in runs if r["run_id"] == run_id]
        return run

    def preempt(self) -> None:
        from tests.integration.tclcli import local_shim_client

        with local_shim_client(self.root / "state") as shim:
            # the host takes no new task until the grace ran out (as a spot VM going away):
            # the resumed attempt waits that long to be placed on it again
            told = shim.post("/preemption", json={"message": "bench", "grace_s": self.grace_s})
            told.raise_for_status()

    def close(self) -> None:
        from tests.integration.tclcli import stop_local_shim_and_tasks

        subprocess.run([TCL, "serve", "--stop"], env=self.env, cwd=self.repo, capture_output=True)
        stop_local_shim_and_tasks(self.root / "state" / "local-shim")


def wait(home: Home, run_id: str, done: Any, what: str, timeout_s: float = 900) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        run = home.run(run_id)
        if done(run):
            return run
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}: {json.dumps(run)[:2000]}")
        time.sleep(1.0)


def stepping(run: dict[str, Any], attempt: int) -> bool:
    """The attempt reached its first step and its run went on a while since."""
    atts = run["attempts"]
    return len(atts) > attempt and atts[attempt]["to_first_step_s"] is not None


def segments(att: dict[str, Any]) -> dict[str, float]:
    return {g["phase"]: g["seconds"] for g in att["start"]}


def _since(segs: dict[str, float], lead: str) -> float:
    """The seconds from phase ``lead`` to ``compiled``."""
    names = list(segs)
    return sum(segs[n] for n in names[names.index(lead) + 1 : names.index("compiled") + 1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8000)
    ap.add_argument("--grace-s", type=float, default=5.0, help="each preemption notice's")
    ap.add_argument("--run-for-s", type=float, default=20.0, help="between preemptions")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tcl-bench-restart-") as tmp:
        home = Home(Path(tmp), a.steps, a.grace_s)
        try:
            run_id = home.submit("preempted")
            for attempt in (0, 1):
                wait(home, run_id, lambda r, n=attempt: stepping(r, n), f"attempt {attempt}")
                time.sleep(a.run_for_s)
                home.preempt()
            final = wait(home, run_id, lambda r: r["state"] in ("succeeded", "failed"), "its end")
            base_id = home.submit("uninterrupted")
            base = wait(home, base_id, lambda r: r["state"] in ("succeeded", "failed"), "its end")
        finally:
            home.close()
    assert final["state"] == base["state"] == "succeeded", (final["state"], base["state"])
    atts = final["attempts"]
    names = list(dict.fromkeys(n for att in [*atts, *base["attempts"]] for n in segments(att)))
    print("time to first step, seconds by phase (phase = the moment it was reached):")
    print(f"{'attempt':<16}" + "".join(f"{n:>13}" for n in names) + f"{'total':>10}")
    rows = [(f"preempted #{x['attempt']}", x) for x in atts]
    rows += [(f"uninterrupted #{x['attempt']}", x) for x in base["attempts"]]
    for label, att in rows:
        segs = segments(att)
        cells = "".join(f"{segs[n]:>13.2f}" if n in segs else f"{'':>13}" for n in names)
        print(f"{label:<16}{cells}{att['to_first_step_s'] or 0:>10.2f}")
    for lead in ("traced", "state_ready"):
        parts = [_since(segments(x), lead) for x in atts]
        first, resumed = parts[0], parts[1:]
        mean_resumed = sum(resumed) / len(resumed)
        what = "compile" if lead == "traced" else "trace+lower+compile"
        print(f"{what}: first attempt {first:.2f} s, resumed {[round(x, 2) for x in resumed]}")
        goal = " (goal <= 0.2)" if lead == "traced" else ""
        print(f"ratio {what} resumed/first: {mean_resumed / first:.2f}{goal}")
    print(f"goodput: preempted twice {final['goodput']:.3f}, uninterrupted {base['goodput']:.3f}")
    print(f"ratio goodput preempted/uninterrupted: {final['goodput'] / base['goodput']:.2f}")
    print("(goal >= 0.9)")


if __name__ == "__main__":
    main()
