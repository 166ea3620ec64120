"""`tcl sync` of a one-line change in a 20,000-file repo, until the runner acknowledges.

On the SSH testbed host (sshd on 127.0.0.1:2222, a shim from `tcl host setup`, the job in a
docker container): a `tcl repl` session is started on a 20,000-file git repo, then one line
is edited and synced, `--reps` times. Measured in a warm process (what `tcl sync --watch` and
`tcl repl --sync` do: one Control, the SSH connection open) and as a cold `tcl sync` command.
Baselines from the same run: `git status --porcelain` on the same repo (the local scan's
floor) and one authenticated round trip to the runner through the same tunnel (the network's
floor). The issue's target: < 0.5 s until the runner acknowledges.

    uv run python bench/sync_remote.py [--files 20000] [--reps 7]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import time
from pathlib import Path

from bench._controllib import TCL, Bed, testbed


def make_repo(repo: Path, files: int) -> None:
    repo.mkdir()
    for i in range(files):
        d = repo / f"pkg{i % 200:03d}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i:05d}.py").write_text(f"VALUE_{i} = {i}\n")
    git = ["git", "-C", str(repo), "-c", "user.email=b@b", "-c", "user.name=b"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)


def start_session(bed: Bed, repo: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [TCL, "repl", "--no-browser", "--host", "box"],
        cwd=repo,
        env=bed.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline()
    if not url.startswith("http://"):
        proc.kill()
        raise SystemExit(f"tcl repl failed: {proc.communicate()[1]}")
    runs = subprocess.run(
        [TCL, "ps", "--json"], env=bed.env(), cwd=repo, capture_output=True, text=True, check=True
    ).stdout
    import json

    return proc, json.loads(runs)[0]["run_id"]


async def warm(bed: Bed, repo: Path, run_id: str, reps: int) -> tuple[list[float], list[float]]:
    """(sync times, runner round trips), interleaved, in one warm process."""
    os.environ.update(bed.env())
    from tcl.control import interactive, syncing
    from tcl.control.config import load_config_at
    from tcl.control.service import Control

    ctl = Control(load_config_at(bed.config, True))
    target = repo / "pkg007" / "mod00007.py"
    sync_s, rtt_s = [], []
    tgt = interactive.target(ctl, run_id)  # kept between syncs, as --watch does
    assert tgt is not None
    try:
        await syncing.sync_once(ctl, run_id, tgt)  # warm: connection, stat cache
        for i in range(reps):
            target.write_text(f"VALUE_7 = {1000 + i}\n")
            s = await syncing.sync_once(ctl, run_id, tgt)
            assert s.paths == 1, s
            sync_s.append(s.elapsed_s)
            t0 = time.perf_counter()
            await (await tgt.api()).session()
            rtt_s.append(time.perf_counter() - t0)
    finally:
        await tgt.aclose()
        await ctl.aclose()
    return sync_s, rtt_s


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    with testbed() as bed:
        repo = bed.root / "big"
        make_repo(repo, args.files)
        proc, run_id = start_session(bed, repo)
        try:
            sync_s, rtt_s = asyncio.run(warm(bed, repo, run_id, args.reps))
            git_s, cli_s = [], []
            for i in range(args.reps):
                t0 = time.perf_counter()
                subprocess.run(
                    ["git", "-C", str(repo), "status", "--porcelain"],
                    capture_output=True,
                    check=True,
                )
                git_s.append(time.perf_counter() - t0)
                (repo / "pkg009" / "mod00009.py").write_text(f"VALUE_9 = {2000 + i}\n")
                t0 = time.perf_counter()
                subprocess.run(
                    [TCL, "sync", run_id], env=bed.env(), cwd=repo, capture_output=True, check=True
                )
                cli_s.append(time.perf_counter() - t0)
        finally:
            proc.kill()
        med = statistics.median
        print(f"repo: {args.files} files; one-line change; {args.reps} reps (medians)")
        print(
            f"sync until acknowledged (warm, as --watch): {med(sync_s) * 1000:.0f} ms "
            f"{[round(x * 1000) for x in sync_s]}"
        )
        print(f"`tcl sync` command (cold process):          {med(cli_s) * 1000:.0f} ms")
        print(f"baseline git status --porcelain:           {med(git_s) * 1000:.0f} ms")
        print(f"baseline runner round trip (same tunnel):  {med(rtt_s) * 1000:.0f} ms")
        print(
            f"ratio sync / (git status + round trip): "
            f"{med(sync_s) / (med(git_s) + med(rtt_s)):.2f}; target: sync < 500 ms "
            f"({'met' if med(sync_s) < 0.5 else 'missed'})"
        )


if __name__ == "__main__":
    main()
