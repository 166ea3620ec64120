"""Runs a small sample job on a runner through its API and prints its logs (scripts/demo.sh).

python scripts/runner_demo.py http://127.0.0.1:PORT
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import sys
import tarfile

from tcl.runner.api import CodeRef, EventKind, JobSpec, LogStream
from tcl.runner.client import RunnerClient

SAMPLE = b"""\
import os, sys, time
print("hello from the sample job in", os.getcwd())
print("the secret is", os.environ["DEMO_TOKEN"], "(masked by the runner)")
for step in range(5):
    print(f"step {step}: loss {1.0 / (step + 1):.3f}")
    time.sleep(0.2)
print("a warning on stderr", file=sys.stderr)
"""


def code_tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = len(SAMPLE)
        tar.addfile(info, io.BytesIO(SAMPLE))
    return buf.getvalue()


async def main(url: str) -> int:
    code = code_tarball()
    digest = hashlib.sha256(code).hexdigest()
    spec = JobSpec(
        run_id="demo-1",
        name="sample",
        argv=[sys.executable, "train.py"],
        secrets={"DEMO_TOKEN": "not-for-your-eyes"},
        code=CodeRef(sha256=digest, size=len(code)),
    )
    async with RunnerClient(url) as client:
        health = await client.wait_healthy()
        print(f"runner {health.version} at {url}: {health.state}")
        await client.submit(spec)
        await client.upload_code(code, digest)
        await client.run()
        exit_code = None
        async for event in client.follow(0):
            if event.kind is EventKind.STATE:
                print(
                    f"[state] {event.state}"
                    + (f" (exit {event.exit_code})" if event.exit_code is not None else "")
                )
                exit_code = event.exit_code
            else:
                prefix = "" if event.stream is LogStream.STDOUT else f"[{event.stream}] "
                for line in (event.data or "").splitlines():
                    print(prefix + line)
    return 0 if exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
