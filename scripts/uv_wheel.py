"""Install uv from its PyPI wheel with the standard library alone (for machines whose Python has
no venv module and no pip): pick the wheel for this platform from PyPI's JSON API, check its
sha256, and unpack the ``uv`` binary it ships into the directory given.

    python3 scripts/uv_wheel.py DEST_DIR
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import stat
import sys
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

INDEX = os.environ.get("TCL_PYPI_JSON", "https://pypi.org/pypi/uv/json")
_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


def pick(files: list[dict[str, object]], arch: str) -> dict[str, object]:
    """The manylinux wheel for ``arch`` (musllinux as a fallback)."""
    wheels = [f for f in files if str(f["filename"]).endswith(".whl")]
    for tag in ("manylinux", "musllinux"):
        for f in wheels:
            name = str(f["filename"])
            if tag in name and name.endswith(f"_{arch}.whl"):
                return f
    raise SystemExit(f"no uv wheel for linux {arch} on PyPI")


def main(dest: Path) -> None:
    arch = _ARCH.get(platform.machine().lower())
    if sys.platform != "linux" or arch is None:
        raise SystemExit(f"install uv yourself (https://docs.astral.sh/uv/): {platform.machine()}")
    with urllib.request.urlopen(INDEX, timeout=60) as r:
        files = json.load(r)["urls"]
    f = pick(files, arch)
    print(f"[setup] downloading {f['filename']}", file=sys.stderr)
    url = urllib.parse.urljoin(INDEX, str(f["url"]))  # a mirror may answer with relative URLs
    with urllib.request.urlopen(url, timeout=300) as r:
        data = r.read()
    digests = f["digests"]
    assert isinstance(digests, dict)
    want = digests["sha256"]
    if hashlib.sha256(data).hexdigest() != want:
        raise SystemExit(f"{f['filename']}: sha256 mismatch")
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        member = next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))
        target = dest / "uv"
        tmp = dest / ".uv.tmp"
        tmp.write_bytes(z.read(member))
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        tmp.replace(target)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
