"""What bounds the bulk rows of issue 29 (log throughput, a first submit): bytes through the
SSH transport tcl uses (asyncssh, in the control plane's Python process) against OpenSSH's
``ssh``, on the same sshd (127.0.0.1:2222, scripts/testbed/ssh-up.sh), in the same run.

- ``ssh HOST cat FILE`` (N random bytes: nothing a negotiated compression could shrink) read by
  this process: OpenSSH's client, in C (the issue's baseline for log throughput is
  ``ssh host cmd | cat``);
- the same command's stdout through tcl's ``SshPool`` (an asyncssh channel);
- a TCP server on the host sending N random bytes, read through ``SshPool.forward`` (the tunnel that
  carries a shim's and a runner's HTTP: every log page and every code upload).

For each: MB/s from the first byte to the last, and the CPU seconds per MB of the processes
that move the bytes (the ``ssh`` client's own, or this process's: asyncssh's decryption and
its Python per-packet work). ``ratio`` is tcl's forward against ``ssh``.

    uv run --locked python -m bench.ssh_transport [--mb 256] [--reps 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench._controllib import ssh_box
from tcl.control.transport.ssh import SshPool, SshTarget

CHUNK = 1 << 20


@contextmanager
def random_server(total: int) -> Iterator[int]:
    """A TCP server on 127.0.0.1 (the host: sshd runs here) that sends ``total`` bytes to each
    connection, then closes it."""
    srv = socket.create_server(("127.0.0.1", 0))
    block = os.urandom(CHUNK)  # repeated: beyond any compressor's window
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                left = total
                while left > 0:
                    n = conn.send(block[: min(left, CHUNK)])
                    left -= n

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        done.set()
        srv.close()


def openssh(keys: Path, data: Path, total: int) -> tuple[float, float]:
    """MB/s and the ``ssh`` client's CPU seconds per MB."""
    argv = ["ssh", "-F", str(keys / "ssh_config"), "-p", "2222", "127.0.0.1"]
    proc = subprocess.Popen([*argv, f"cat {data}"], stdout=subprocess.PIPE)
    assert proc.stdout is not None
    got, t0 = 0, 0.0
    while chunk := os.read(proc.stdout.fileno(), CHUNK):
        if not got:
            t0 = time.perf_counter()
        got += len(chunk)
    took = time.perf_counter() - t0
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0 and got == total, (status, got)
    mb = total / 1e6
    return mb / took, (usage.ru_utime + usage.ru_stime) / mb


async def asyncssh_stdout(
    pool: SshPool, target: SshTarget, data: Path, total: int
) -> tuple[float, float]:
    """MB/s and this process's CPU seconds per MB: the command's stdout on an asyncssh
    channel."""
    conn = await pool.connection(target)
    cpu0 = time.process_time()
    async with conn.create_process(f"cat {data}", encoding=None) as proc:
        got, t0 = 0, 0.0
        while chunk := await proc.stdout.read(CHUNK):
            if not got:
                t0 = time.perf_counter()
            got += len(chunk)
        took = time.perf_counter() - t0
    assert got == total, got
    mb = total / 1e6
    return mb / took, (time.process_time() - cpu0) / mb


async def asyncssh_forward(
    pool: SshPool, target: SshTarget, port: int, total: int
) -> tuple[float, float]:
    """MB/s and this process's CPU seconds per MB: the host's TCP server through the forward
    tcl opens to a shim."""
    local = await pool.forward(target, port)
    cpu0 = time.process_time()
    reader, writer = await asyncio.open_connection("127.0.0.1", local)
    got, t0 = 0, 0.0
    while chunk := await reader.read(CHUNK):
        if not got:
            t0 = time.perf_counter()
        got += len(chunk)
    took = time.perf_counter() - t0
    writer.close()
    assert got == total, got
    mb = total / 1e6
    return mb / took, (time.process_time() - cpu0) / mb


async def measure(
    keys: Path, data: Path, total: int, reps: int
) -> dict[str, list[tuple[float, float]]]:
    target = SshTarget(
        name="box",
        host="127.0.0.1",
        port=2222,
        user="root",
        identity_file=str(keys / "id_ed25519"),
        known_hosts=str(keys / "known_hosts"),
        config_file=str(keys / "ssh_config"),
    )
    pool = SshPool()
    out: dict[str, list[tuple[float, float]]] = {"ssh": [], "asyncssh stdout": [], "forward": []}
    try:
        with random_server(total) as port:
            await asyncssh_forward(pool, target, port, total)  # warm: connect, forward
            for _ in range(reps):  # interleaved
                out["ssh"].append(await asyncio.to_thread(openssh, keys, data, total))
                out["asyncssh stdout"].append(await asyncssh_stdout(pool, target, data, total))
                out["forward"].append(await asyncssh_forward(pool, target, port, total))
    finally:
        await pool.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    total = args.mb * CHUNK
    with ssh_box() as keys, tempfile.TemporaryDirectory(prefix="tcl-bench-transport-") as tmp:
        data = Path(tmp) / "random.bin"
        with open(data, "wb") as f:
            for _ in range(args.mb):
                f.write(os.urandom(CHUNK))
        results = asyncio.run(measure(keys, data, total, args.reps))
    med = {}
    for what, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        med[what] = rate
        shown = [round(r) for r, _ in runs]
        print(f"{what:16s} {rate:7.1f} MB/s  {cpu * 1e3:5.2f} ms CPU per MB  {shown}")
    print(f"ratio asyncssh forward / ssh (MB/s): {med['forward'] / med['ssh']:.2f}")
    print(f"ratio asyncssh stdout / ssh (MB/s): {med['asyncssh stdout'] / med['ssh']:.2f}")


if __name__ == "__main__":
    main()
