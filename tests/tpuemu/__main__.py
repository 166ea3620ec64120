"""``python -m tests.tpuemu``: serve the emulator for manual use (Ctrl-C stops it).

Workers: ``--worker IP[,NETNS[,SSHD_PID_FILE]]`` (repeatable), or ``--testbed DIR`` for the
hosts of scripts/testbed/ssh-up.sh (DIR: its ``$BASE/ssh``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tests.tpuemu.config import DEFAULT_ZONES
from tests.tpuemu.server import TpuEmulator
from tests.tpuemu.workers import WorkerHost, hosts_of_testbed


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.tpuemu", description=__doc__)
    ap.add_argument("--port", type=int, default=18471)
    ap.add_argument("--zone", action="append", help=f"default: {', '.join(DEFAULT_ZONES)}")
    ap.add_argument("--worker", action="append", default=[])
    ap.add_argument("--testbed", type=Path, help="the testbed's ssh dir (keys, ssh_config)")
    ap.add_argument("--testbed-hosts", type=int, default=3)
    ap.add_argument("--create-delay-s", type=float, default=0.5)
    ap.add_argument("--require-auth", action="store_true")
    args = ap.parse_args()
    workers = [WorkerHost(*_worker(w)) for w in args.worker]
    ssh_config = None
    if args.testbed is not None:
        workers += hosts_of_testbed(args.testbed, args.testbed_hosts)
        ssh_config = args.testbed / "ssh_config"
    emu = TpuEmulator(
        workers,
        ssh_config,
        zones=args.zone or DEFAULT_ZONES,
        create_delay_s=args.create_delay_s,
        require_auth=args.require_auth,
        port=args.port,
    )
    with emu:
        print(f"TPU API emulator on {emu.url} (logs in {emu.log_dir}); Ctrl-C stops it")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


def _worker(spec: str) -> tuple[str, str | None, Path | None]:
    ip, netns, pid = ([*spec.split(","), "", ""])[:3]
    return ip, netns or None, Path(pid) if pid else None


if __name__ == "__main__":
    main()
