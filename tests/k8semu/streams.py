"""``pods/exec`` and ``pods/portforward`` over WebSockets, as the kubelet speaks them.

Exec (``v5.channel.k8s.io``, else ``v4.channel.k8s.io``): every frame starts with a channel
byte: 0 stdin, 1 stdout, 2 stderr, 3 the final status JSON, 4 resize (ignored), and on v5
255 = close a channel (``[255, 0]`` closes the command's stdin). The command runs through
``nsenter`` in the pod's mount, network and UTS namespaces, under the container's env.

Port-forward (``v4.channel.k8s.io``, or ``portforward.k8s.io``): port ``i`` of the ``ports``
query has data channel ``2i`` and error channel ``2i+1``; the server's first frame on each is
the port as 2 bytes little-endian. Then the bytes are piped to ``localhost:port`` inside the
pod's network namespace (a socket made by a thread that ``setns``-es into it), as the kubelet
does. The WebSocket closes once every port's connection has ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import fcntl
import json
import os
import socket
import struct
import subprocess
import termios
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from tests.k8semu import errors, kubelet
from tests.k8semu.errors import ApiError
from tests.k8semu.resources import PODS

if TYPE_CHECKING:  # no import cycle at runtime
    from tests.k8semu.app import Api

EXEC_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
PF_PROTOCOLS = ("v4.channel.k8s.io", "portforward.k8s.io")
CLONE_NEWNET = 0x40000000


def _pick(ws: WebSocket, supported: tuple[str, ...]) -> str | None:
    offered = [p.strip() for p in ws.scope.get("subprotocols", [])]
    return next((p for p in supported if p in offered), None)


async def _deny(ws: WebSocket, err: ApiError) -> None:
    await ws.send_denial_response(JSONResponse(err.body(), status_code=err.code))


def _running(api: Api, ws: WebSocket, sub: str) -> kubelet.PodProcess:
    ns = api.guard(ws, PODS, "create", sub)
    name = str(ws.path_params["name"])
    with api.c.lock:
        rec = api.pod(ns, name)
        if rec.phase in ("Succeeded", "Failed"):
            raise errors.bad_request(
                f"cannot {sub} into a container in a completed pod; current phase is {rec.phase}"
            )
        if rec.proc is None or rec.proc.exit_code() is not None:
            cname = rec.obj["spec"]["containers"][0]["name"]
            raise errors.bad_request(f'container "{cname}" in pod "{name}" is not running')
        return rec.proc


def _status(code: int, argv: list[str]) -> bytes:
    if code == 0:
        body: dict[str, Any] = {"metadata": {}, "status": "Success"}
    else:
        body = {
            "metadata": {},
            "status": "Failure",
            "message": (
                f"command terminated with non-zero exit code: error executing command "
                f"[{' '.join(argv)}], exit code {code}"
            ),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
        }
    return bytes([3]) + json.dumps(body).encode()


def _frame(msg: Mapping[str, Any]) -> bytes | None:
    """A received WebSocket message's bytes (text frames carry the channel as a character)."""
    if msg.get("bytes") is not None:
        return bytes(msg["bytes"])
    if msg.get("text") is not None:
        return str(msg["text"]).encode()
    return None


async def exec_ws(api: Api, ws: WebSocket) -> None:
    q = ws.query_params
    argv = q.getlist("command")
    try:
        proc = _running(api, ws, "exec")
        if not argv:
            raise errors.bad_request("you must specify at least 1 command")
    except ApiError as err:
        await _deny(ws, err)
        return
    protocol = _pick(ws, EXEC_PROTOCOLS)
    await ws.accept(subprotocol=protocol)
    want_stdin = q.get("stdin") in ("true", "1")
    if q.get("tty") in ("true", "1"):
        await _exec_tty(ws, proc, argv)
        return
    child = await asyncio.create_subprocess_exec(
        *kubelet.exec_argv(proc, argv),
        stdin=asyncio.subprocess.PIPE if want_stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=proc.env,
        start_new_session=True,
    )

    async def pump(stream: asyncio.StreamReader | None, channel: int) -> None:
        assert stream is not None
        while chunk := await stream.read(65536):
            if q.get("stdout" if channel == 1 else "stderr") in ("true", "1"):
                await ws.send_bytes(bytes([channel]) + chunk)

    async def feed() -> None:
        try:
            while True:
                data = _frame(await ws.receive())
                if data is None:  # the client went away
                    child.kill()
                    return
                if not data or child.stdin is None:
                    continue
                if data[0] == 0 and len(data) > 1:
                    child.stdin.write(data[1:])
                    await child.stdin.drain()
                elif data[0] == 255 and data[1:2] == b"\x00":
                    child.stdin.close()
        except (WebSocketDisconnect, ConnectionError, RuntimeError):
            with contextlib.suppress(ProcessLookupError):
                child.kill()

    feeder = asyncio.create_task(feed())
    await asyncio.gather(pump(child.stdout, 1), pump(child.stderr, 2))
    code = await child.wait()
    feeder.cancel()
    with contextlib.suppress(Exception):
        await ws.send_bytes(_status(128 - code if code < 0 else code, argv))
        await ws.close()


async def _exec_tty(ws: WebSocket, proc: kubelet.PodProcess, argv: list[str]) -> None:
    """``tty=true``: the command on a pseudo-terminal (its controlling terminal), stdout and
    stderr merged on channel 1 as the kubelet does, channel 4's ``{"Width", "Height"}`` setting
    the terminal's size."""
    master, slave = os.openpty()
    child = subprocess.Popen(  # setsid -c: a session of its own, the pty its terminal
        ["setsid", "-c", "-w", *kubelet.exec_argv(proc, argv)],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=proc.env,
    )
    os.close(slave)
    loop = asyncio.get_running_loop()

    def read() -> bytes:
        try:
            return os.read(master, 65536)
        except OSError:  # EIO: every process holding the terminal is gone
            return b""

    async def pump() -> None:
        while chunk := await loop.run_in_executor(None, read):
            await ws.send_bytes(bytes([1]) + chunk)

    async def feed() -> None:
        with contextlib.suppress(WebSocketDisconnect, ConnectionError, RuntimeError, OSError):
            while (data := _frame(await ws.receive())) is not None:
                if data[:1] == b"\x00" and len(data) > 1:
                    os.write(master, data[1:])
                elif data[:1] == b"\x04":
                    size = json.loads(data[1:])
                    packed = struct.pack("HHHH", int(size["Height"]), int(size["Width"]), 0, 0)
                    fcntl.ioctl(master, termios.TIOCSWINSZ, packed)
        with contextlib.suppress(ProcessLookupError):
            child.kill()

    feeder = asyncio.create_task(feed())
    await pump()
    code = await asyncio.to_thread(child.wait)
    feeder.cancel()
    os.close(master)
    with contextlib.suppress(Exception):
        await ws.send_bytes(_status(128 - code if code < 0 else code, argv))
        await ws.close()


def _connect_in_netns(netns: str, port: int) -> socket.socket:
    """A TCP connection to ``127.0.0.1:port`` inside ``netns`` (via a throwaway thread)."""
    result: list[socket.socket | BaseException] = []

    def work() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
            try:
                if libc.setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns failed")
            finally:
                os.close(fd)
            result.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        except BaseException as err:  # handed to the caller
            result.append(err)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join()
    out = result[0]
    if isinstance(out, BaseException):
        raise out
    out.settimeout(None)
    return out


async def portforward_ws(api: Api, ws: WebSocket) -> None:
    try:
        proc = _running(api, ws, "portforward")
        ports = [int(p) for v in ws.query_params.getlist("ports") for p in v.split(",") if p]
        if not ports:
            raise errors.bad_request("at least one port must be specified")
    except (ApiError, ValueError) as err:
        await _deny(ws, err if isinstance(err, ApiError) else errors.bad_request(str(err)))
        return
    await ws.accept(subprotocol=_pick(ws, PF_PROTOCOLS))
    writers: dict[int, asyncio.StreamWriter] = {}
    readers: list[asyncio.Task[None]] = []
    for i, port in enumerate(ports):
        prefix = bytes([port & 0xFF, port >> 8])
        await ws.send_bytes(bytes([2 * i]) + prefix)
        await ws.send_bytes(bytes([2 * i + 1]) + prefix)
        try:
            sock = await asyncio.to_thread(_connect_in_netns, proc.netns, port)
        except OSError as err:
            msg = (
                f"an error occurred forwarding {port} -> {port}: error forwarding port {port} "
                f"to pod, failed to connect to localhost:{port} inside namespace "
                f'"{proc.netns}": {err}'
            )
            await ws.send_bytes(bytes([2 * i + 1]) + msg.encode())
            continue
        reader, writer = await asyncio.open_connection(sock=sock)
        writers[2 * i] = writer

        async def up(reader: asyncio.StreamReader, channel: int) -> None:
            while chunk := await reader.read(65536):
                await ws.send_bytes(bytes([channel]) + chunk)

        readers.append(asyncio.create_task(up(reader, 2 * i)))

    async def down() -> None:
        with contextlib.suppress(WebSocketDisconnect, ConnectionError, RuntimeError):
            while True:
                data = _frame(await ws.receive())
                if data is None:
                    return
                w = writers.get(data[0]) if data else None
                if w is not None and len(data) > 1:
                    w.write(data[1:])
                    await w.drain()

    downer = asyncio.create_task(down())
    if readers:
        await asyncio.wait([*readers, downer], return_when=asyncio.FIRST_COMPLETED)
        if not downer.done():
            await asyncio.gather(*readers, return_exceptions=True)
    downer.cancel()
    for w in writers.values():
        w.close()
    with contextlib.suppress(Exception):
        await ws.close()
