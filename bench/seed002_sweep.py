"""Seed 002's workload: its 1,200-entry manifest, `--where method=fft`, ~5 % of jobs failing.

The manifest is written in the seed's schema (job_id, method, lang, fleurs_code, config_id,
seed, asr_ratio, run_kind, output_dir...: 3 methods x 20 languages x 4 configs x 5 seeds), and
`tcl matrix add matrix.json --where method=fft` queues its 400 fft entries on a local host with
8 fake h100s and the process executor (throwaway HOME, state dir, config and git repo). Each job
sleeps `--sleep-s`; one in twenty (by a hash of its job_id, the same every run) prints a step
and dies with `RuntimeError: CUDA out of memory...` as a real one would.

Printed: `tcl matrix status ft` as a user sees it, what the export (the seed's
`matrix_status.json`) says of where entries ran (scheduler = the seed's pod, pid, gpus), and the
drain time against the same jobs run by a bare 8-thread `subprocess.run` loop in the same run:
`ratio` tcl / bare loop. `--screenshots DIR`: what `tcl ui` shows of it (the runs page, the
failed runs, the matrix grouped by lang), taken in headless chromium.

    uv run --locked python -m bench.seed002_sweep [--sleep-s 0.5] [--timeout-s 900]
        [--screenshots DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from bench.sweep_gap import TCL, stop_daemon, tcl_env
from tests.integration.tclcli import stored_matrix_status

METHODS = ("fft", "vft", "vftmtl")
LANGS = {
    "spanish": "es_419",
    "french": "fr_fr",
    "german": "de_de",
    "hindi": "hi_in",
    "swahili": "sw_ke",
    "tamil": "ta_in",
    "thai": "th_th",
    "turkish": "tr_tr",
    "urdu": "ur_pk",
    "welsh": "cy_gb",
    "yoruba": "yo_ng",
    "zulu": "zu_za",
    "bengali": "bn_in",
    "czech": "cs_cz",
    "greek": "el_gr",
    "hausa": "ha_ng",
    "icelandic": "is_is",
    "korean": "ko_kr",
    "lao": "lo_la",
    "maltese": "mt_mt",
}
CONFIGS = ("A", "B", "C", "D")
SEEDS = (42, 1, 2, 3, 4)

JOB = """\
import sys, time, zlib
job_id, sleep_s = sys.argv[1], float(sys.argv[2])
time.sleep(sleep_s)
if zlib.crc32(job_id.encode()) % 20 == 0:
    print("step 0 loss 2.31", flush=True)
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total)")
print("done", job_id)
"""


def manifest() -> list[dict[str, Any]]:
    out = []
    for method in METHODS:
        for lang, code in LANGS.items():
            for cfg in CONFIGS:
                for seed in SEEDS:
                    kind = "main" if seed == 42 else "textmix_sweep"
                    job_id = f"{method}_{lang}_cfg{cfg}_s{seed}_{kind}"
                    out.append(
                        {
                            "job_id": job_id,
                            "method": method,
                            "lang": lang,
                            "fleurs_code": code,
                            "whisper_lang": lang,
                            "config_id": cfg,
                            "seed": seed,
                            "asr_ratio": 0.5,
                            "max_text_lines": 500000,
                            "text_mtl_path": f"/data/goldfish/{code}.txt",
                            "output_dir": f"/checkpoints/matrix_runs/{job_id}",
                            "run_kind": kind,
                        }
                    )
    return out


def fails(job_id: str) -> bool:
    return zlib.crc32(job_id.encode()) % 20 == 0


def bare_loop(job: Path, ids: list[str], sleep_s: float, gpus: int) -> float:
    """The same jobs, 8 threads each running one `subprocess.run` after another: the wall."""
    todo = list(ids)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                job_id = todo.pop()
            subprocess.run(
                [sys.executable, str(job), job_id, str(sleep_s)], capture_output=True, check=False
            )

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker) for _ in range(gpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - t0


def tcl(env: dict[str, str], repo: Path, *args: str) -> str:
    p = subprocess.run([TCL, *args], env=env, cwd=repo, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"tcl {' '.join(args)} -> {p.returncode}:\n{p.stderr}")
    return p.stdout


def run_sweep(root: Path, sleep_s: float, gpus: int, timeout_s: float) -> float:
    repo = root / "repo"
    (root / "home").mkdir()
    host = f'{{type: local, fake_accelerators: "h100:{gpus}", executor: process}}'
    (root / "config.yaml").write_text(f"hosts:\n  here: {host}\n")
    env = {**tcl_env(root), "COLUMNS": "160", "TCL_SCHEDULER_NAME": "pod-0"}
    matrix = root / "matrix.json"
    matrix.write_text(json.dumps(manifest(), indent=1))
    t0 = time.monotonic()
    add = ["matrix", "add", str(matrix), "--name", "ft", "--chip", "h100", "--where", "method=fft"]
    tcl(env, repo, *add, "--", "python", "job.py", "{job_id}", str(sleep_s))
    deadline = time.monotonic() + timeout_s
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        time.sleep(1.0)
        # read from the sweep's store in this process: a `tcl matrix status` process a second
        # would take a tenth of a core from the sweep it times
        status = stored_matrix_status(env, "ft")
        counts = status["counts"]
        if counts["done"] + counts["failed"] + counts["cancelled"] >= status["total"]:
            break
    wall = time.monotonic() - t0
    print("$ tcl matrix status ft")
    print(tcl(env, repo, "matrix", "status", "ft"))
    export: dict[str, dict[str, Any]] = json.loads(tcl(env, repo, "matrix", "export", "ft"))
    failed = [k for k, v in export.items() if v["state"] == "failed"]
    expected = sorted(k for k in export if fails(k))
    print(f"entries {len(export)} (of {len(manifest())} in the manifest: --where method=fft)")
    print(
        f"failed {len(failed)}, expected to fail {len(expected)}: same {sorted(failed) == expected}"
    )
    print(
        "export: scheduler set on "
        f"{sum(1 for v in export.values() if v['scheduler'])}, pid on "
        f"{sum(1 for v in export.values() if v['pid'])}, gpus on "
        f"{sum(1 for v in export.values() if v['gpus'])} of {len(export)}"
    )
    if failed:
        print("a failed entry in the export:", json.dumps({failed[0]: export[failed[0]]}, indent=1))
    return wall


def screenshots(root: Path, out: Path) -> None:
    """The dashboard of this sweep's store: `tcl ui`, pages taken with playwright."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    env = {**tcl_env(root), "TCL_SERVE": "0"}
    ui = subprocess.Popen(
        [TCL, "ui", "--no-browser"], env=env, cwd=root / "repo", stdout=subprocess.PIPE, text=True
    )
    try:
        assert ui.stdout is not None
        url = ui.stdout.readline().strip()
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path="/usr/bin/chromium",
                args=["--no-sandbox", "--disable-dev-shm-usage"],
            )
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url)
            page.wait_for_selector("text=succeeded")
            page.screenshot(path=str(out / "seed002-runs.png"))
            page.click("text=failed")
            page.wait_for_timeout(500)
            page.screenshot(path=str(out / "seed002-failed.png"))
            page.goto(f"{url}#/matrices/ft")
            page.wait_for_selector("#matrix-group option[value=lang]", state="attached")
            page.select_option("#matrix-group", "lang")
            page.wait_for_timeout(500)
            page.screenshot(path=str(out / "seed002-matrix-by-lang.png"), full_page=True)
            browser.close()
        print(f"screenshots of tcl ui in {out}")
    finally:
        ui.terminate()
        ui.wait(15)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sleep-s", type=float, default=0.5)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--screenshots", type=Path, default=None, help="where tcl ui's pages go")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tcl-seed002-") as tmp:
        root = Path(tmp)
        repo = root / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        (repo / "job.py").write_text(JOB)
        ids = [e["job_id"] for e in manifest() if e["method"] == "fft"]
        base = bare_loop(repo / "job.py", ids, args.sleep_s, args.gpus)
        try:
            wall = run_sweep(root, args.sleep_s, args.gpus, args.timeout_s)
            if args.screenshots is not None:
                screenshots(root, args.screenshots)
        finally:
            stop_daemon(root, repo)
        print(
            f"drain of {len(ids)} entries: tcl {wall:.1f} s (from matrix add), bare loop ", end=""
        )
        print(f"{base:.1f} s")
        print(f"ratio tcl/bare-loop drain: {wall / base:.2f}")


if __name__ == "__main__":
    main()
