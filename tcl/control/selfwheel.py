"""A wheel of the tcl that is running, for hosts that install it: built from the checkout when
this is one (``uv build``), else repacked from the installed distribution's own files (a ``uv tool
install`` or ``pip install`` has no ``pyproject.toml`` to build from).

The repacked wheel holds what the distribution's RECORD lists under the ``tcl`` package and its
``.dist-info`` (metadata, entry points, licence), never bytecode, scripts or the installer's own
files; its RECORD is written anew with each file's sha256, so pip and uv verify it as any wheel.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import zipfile
from pathlib import Path

from tcl import DISTRIBUTION
from tcl.control.errors import HostSetupError

# Written by the installer, not part of the wheel it installed.
_INSTALLER_FILES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json"}
_WHEEL = "Wheel-Version: 1.0\nGenerator: tcl\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def repack_installed(dest: Path) -> Path:
    """The installed tcl as a wheel in ``dest``."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise HostSetupError(f"{DISTRIBUTION} is not installed here: set `shim_package`") from None
    files = dist.files or []
    info_dir = f"{DISTRIBUTION.replace('-', '_')}-{dist.version}.dist-info"
    members: list[tuple[str, bytes]] = []
    for f in files:
        name = str(f).replace("\\", "/")
        top = name.split("/", 1)[0]
        keep_pkg = top == "tcl" and "__pycache__" not in name and not name.endswith(".pyc")
        keep_info = top == info_dir and name.rsplit("/", 1)[-1] not in _INSTALLER_FILES
        if keep_pkg or keep_info:
            members.append((name, Path(str(f.locate())).read_bytes()))
    if not any(name.startswith("tcl/") for name, _ in members):
        # an editable install lists a .pth, not the package: build from the checkout instead
        raise HostSetupError("this tcl is not installed from a wheel: set `shim_package`")
    if not any(name == f"{info_dir}/WHEEL" for name, _ in members):
        members.append((f"{info_dir}/WHEEL", _WHEEL.encode()))
    wheel = dest / f"{DISTRIBUTION.replace('-', '_')}-{dist.version}-py3-none-any.whl"
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in members]
    record.append(f"{info_dir}/RECORD,,")
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members:
            z.writestr(name, data)
        z.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return wheel
