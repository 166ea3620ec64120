"""Hand a run's code to its runner from the host's code cache (the ``ssh`` backend).

argv: ``TARBALL SHA256``: the cached tarball (``<shim_dir>/code/<sha256>.tar.gz``) and its
sha256. stdin: one line ``PORT TOKEN``, the runner's loopback port and bearer token (so the
token never reaches a command line); it arrives once the runner is up, so the interpreter
starts while the runner's container does. stdout: nothing.

First the runner is asked to take the tree from the host's extracted-tree cache
(``POST /api/code/cached``: no upload, no extraction); when it is not there (404, or 405 from
a runner older than that cache) the tarball is streamed to ``PUT /api/code``. The tarball's
mtime is touched first: the shim evicts the least recently used tarballs first.

Exit status: 0 the runner has the code; 3 neither cache has it (send the tarball again);
4 no port arrived (stdin closed: the submit gave up); 1 the runner refused it (one line on
stderr).

Standard library only: run where tcl's own modules are not imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import urllib.error
import urllib.request

CODE_PATH = "/api/code"
CACHED_CODE_PATH = "/api/code/cached"
SHA256_HEADER = "X-Code-Sha256"
TIMEOUT_S = 600
NO_TARBALL = 3
NO_PORT = 4


def main(argv: list[str]) -> int:
    path, sha = argv[0], argv[1]
    with contextlib.suppress(OSError):
        os.utime(path)  # used now: the shim evicts the least recently used tarballs first
    port, _, token = sys.stdin.readline().strip().partition(" ")
    if not port.isdigit():
        return NO_PORT
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": f"Bearer {token}"}
    req = urllib.request.Request(
        base + CACHED_CODE_PATH,
        data=json.dumps({"sha256": sha}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", **auth},
    )
    try:
        urllib.request.urlopen(req, timeout=TIMEOUT_S).read()
        return 0
    except urllib.error.HTTPError as e:
        if e.code not in (404, 405):  # 405: a runner from before the code cache
            sys.exit(f"runner refused the cached code: {e.code} {e.read()[:300]!r}")
    if not os.path.isfile(path):
        return NO_TARBALL
    with open(path, "rb") as f:
        req = urllib.request.Request(
            base + CODE_PATH,
            data=f,
            method="PUT",
            headers={
                SHA256_HEADER: sha,
                "Content-Length": str(os.fstat(f.fileno()).st_size),
                "Content-Type": "application/gzip",
                **auth,
            },
        )
        try:
            urllib.request.urlopen(req, timeout=TIMEOUT_S).read()
        except urllib.error.HTTPError as e:
            sys.exit(f"runner refused the code: {e.code} {e.read()[:300]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
