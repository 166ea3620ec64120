"""``python -m tests.k8semu``: serve the emulator for manual use (Ctrl-C stops it).

``--queue NAME[:RESOURCE=N,...]`` (repeatable), ``--pvc NAMESPACE/CLAIM=HOST_DIR``
(repeatable), ``--namespace NS`` (repeatable); the kubeconfig goes to ``--kubeconfig``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from tests.k8semu.config import QueueSpec
from tests.k8semu.server import K8sEmulator


def _queue(spec: str) -> QueueSpec:
    name, _, caps = spec.partition(":")
    pairs = [c.split("=", 1) for c in caps.split(",") if c]
    return QueueSpec(name, {k: int(v) for k, v in pairs})


def _pvc(spec: str) -> tuple[tuple[str, str], Path]:
    key, _, path = spec.partition("=")
    ns, _, claim = key.partition("/")
    return (ns, claim), Path(path)


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM stops it as Ctrl-C does; later signals are ignored so the cleanup (pods, netns,
    the bridge) runs to its end."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m tests.k8semu", description=__doc__)
    ap.add_argument("--port", type=int, default=18472)
    ap.add_argument("--namespace", action="append")
    ap.add_argument("--queue", action="append", type=_queue)
    ap.add_argument("--pvc", action="append", type=_pvc, default=[])
    ap.add_argument("--bin-dir", type=Path, default=Path(sys.executable).parent)
    ap.add_argument("--kubeconfig", type=Path, default=Path("/tmp/k8semu.kubeconfig"))
    ap.add_argument("--no-volcano", action="store_true", help="Volcano is not installed")
    args = ap.parse_args()
    emu = K8sEmulator(
        namespaces=args.namespace or ("tcl",),
        queues=args.queue or (QueueSpec("default", {"nvidia.com/gpu": 8}),),
        pvcs=dict(args.pvc),
        bin_dir=args.bin_dir,
        volcano_installed=not args.no_volcano,
        port=args.port,
    )
    signal.signal(signal.SIGTERM, _interrupt)
    with emu:
        emu.write_kubeconfig(args.kubeconfig)
        print(f"Kubernetes emulator on {emu.url}; KUBECONFIG={args.kubeconfig}; Ctrl-C stops it")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":
    main()
