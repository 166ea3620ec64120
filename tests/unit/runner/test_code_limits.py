"""Archive bombs: oversized headers, a million members, too many bytes. Each is refused at
the header that crosses a limit, in flat memory, with a short message.

The big archives are cheap to make: headers are written by hand and the data behind them is
a hole in a sparse file (or gzip of a repeated header), so nothing big is written or read
unless the extractor really reads it."""

from __future__ import annotations

import gzip
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from tcl.runner.code import extract
from tcl.runner.errors import UnsafeArchive
from tcl.runner.tarread import MAX_CHAINED_HEADERS
from tests.unit.runner.test_code import add_file, make_tar

GiB = 1024**3


def header(name: str, kind: bytes, size: int = 0) -> bytes:
    """One 512-byte header block, as tar writes it (checksum included)."""
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    return info.tobuf(tarfile.GNU_FORMAT)


def padded(size: int) -> int:
    return -(-size // 512) * 512


def with_hole(path: Path, first: bytes, hole: int, rest: bytes) -> Path:
    """``first``, then ``hole`` zero bytes that take no disk (a sparse file), then ``rest``."""
    with open(path, "wb") as f:
        f.write(first)
        f.seek(len(first) + padded(hole))
        f.write(rest + b"\0" * 1024)
    return path


def refusal_and_peak(archive: Path, work: Path, **limits: int) -> tuple[UnsafeArchive | None, int]:
    """The refusal (None if it extracted) and the peak Python heap meanwhile (a bound, not a
    timing: tracemalloc sees every buffer tarfile reads)."""
    tracemalloc.start()
    try:
        try:
            extract(archive, work, **limits)
            error = None
        except UnsafeArchive as e:
            error = e
        return error, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    ("kind", "size"),
    [
        (tarfile.GNUTYPE_LONGNAME, 1 * GiB),
        (tarfile.GNUTYPE_LONGLINK, 1 * GiB),
        (tarfile.XHDTYPE, 2 * GiB),
        (tarfile.XGLTYPE, 2 * GiB),
    ],
    ids=["gnu-longname-1GiB", "gnu-longlink-1GiB", "pax-2GiB", "pax-global-2GiB"],
)
def test_huge_extended_header_is_refused_before_it_is_read(
    tmp_path: Path, kind: bytes, size: int
) -> None:
    # Before: tarfile read the whole header into memory (1 GiB name: 8 GB RSS, a 64 MB error).
    archive = with_hole(
        tmp_path / "bomb.tar", header("././@LongLink", kind, size), size, header("x", b"0")
    )
    work = tmp_path / "work"
    error, peak = refusal_and_peak(archive, work)
    assert error is not None, "the archive was extracted"
    assert "extended header" in str(error) and len(str(error)) < 200
    assert peak < 16 * 1024**2, f"peak {peak / 1024**2:.0f} MiB"
    assert not work.exists()


def test_members_past_the_count_limit_are_refused(tmp_path: Path) -> None:
    """The count limit (a million members at 20,000, in flat memory, is
    tests/integration/runner/test_code_limits.py)."""
    one = header("d", tarfile.DIRTYPE)
    archive = tmp_path / "many.tgz"
    archive.write_bytes(gzip.compress(one * 3000 + b"\0" * 1024, compresslevel=1))
    work = tmp_path / "work"
    error, _ = refusal_and_peak(archive, work, max_members=2000)
    assert error is not None and "more than 2000 members" in str(error)
    assert not work.exists()


def test_unpacked_size_limit_is_hit_mid_stream(tmp_path: Path) -> None:
    """The archive ends (truncated) right after the header that crosses the limit: refusing
    it for its size proves the limit is checked before the rest is read."""

    def build(tar: tarfile.TarFile) -> None:
        add_file(tar, "a", b"a" * 600)
        add_file(tar, "b", b"b" * 600)

    whole = make_tar(tmp_path / "c.tar", build, mode="w")
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole.read_bytes()[: 512 + 1024 + 512])  # a's header and data, b's header
    work = tmp_path / "work"
    with pytest.raises(UnsafeArchive, match="more than 1000 bytes"):
        extract(cut, work, max_unpacked_bytes=1000)
    assert not work.exists()


def chained_pax(n: int) -> bytes:
    record = b"11 key=val\n"
    block = header("pax", tarfile.XHDTYPE, len(record)) + record.ljust(512, b"\0")
    return block * n + header("x", tarfile.REGTYPE)


@pytest.mark.parametrize(
    ("case", "data", "match"),
    [
        ("chained", chained_pax(MAX_CHAINED_HEADERS + 1), "extended headers in a row"),
        ("sparse", header("s", tarfile.GNUTYPE_SPARSE), "sparse file"),
    ],
)
def test_header_tricks_are_refused(tmp_path: Path, case: str, data: bytes, match: str) -> None:
    archive = tmp_path / f"{case}.tar"
    archive.write_bytes(data + b"\0" * 1024)
    with pytest.raises(UnsafeArchive, match=match):
        extract(archive, tmp_path / "work")
    assert not (tmp_path / "work").exists()


def test_chained_headers_up_to_the_limit_are_fine(tmp_path: Path) -> None:
    ok = tmp_path / "ok.tar"
    ok.write_bytes(chained_pax(MAX_CHAINED_HEADERS) + b"\0" * 1024)
    assert extract(ok, tmp_path / "work") == 1
    assert (tmp_path / "work" / "x").read_bytes() == b""


async def test_error_bodies_stay_short(tmp_path: Path) -> None:
    """A 60 KiB member name (under the header limit) is quoted cut short; and the app caps
    any detail as a backstop."""
    import httpx

    from tcl.runner.api import CodeRef, JobSpec
    from tcl.runner.app import create_app
    from tcl.runner.middleware import error_response as _error
    from tcl.runner.service import Runner, RunnerConfig
    from tests.unit.runner.conftest import TOKEN, sha

    name = "n" * 60_000
    long_name = header("././@LongLink", tarfile.GNUTYPE_LONGNAME, len(name))
    code = long_name + name.encode().ljust(padded(len(name)), b"\0") + header("x", b"0")
    code += b"\0" * 1024
    runner = Runner(RunnerConfig(state_dir=tmp_path / "state"))
    app = create_app(runner, TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://r", headers=auth) as c:
        spec = JobSpec(run_id="r", argv=["true"], code=CodeRef(sha256=sha(code), size=len(code)))
        body = spec.model_dump_json()
        submitted = await c.post(
            "/api/submit", content=body, headers={"Content-Type": "application/json"}
        )
        assert submitted.status_code == 200
        r = await c.put("/api/code", content=code, headers={"X-Code-Sha256": sha(code)})
    runner.close()
    assert r.status_code == 422 and r.json()["error"] == "unsafe_archive"
    assert len(r.content) < 500 and "…" in r.json()["detail"]
    assert len(_error(500, "storage_error", "x" * 100_000).body) < 1100


@pytest.mark.parametrize("cached", [False, True])
def test_the_member_limit_comes_from_the_runner_config(tmp_path: Path, cached: bool) -> None:
    from tcl.runner.api import CodeRef, JobSpec
    from tcl.runner.service import Runner, RunnerConfig
    from tests.unit.runner.conftest import sha, tarball

    code = tarball({"a.py": b"", "b.py": b"", "c.py": b""})
    (tmp_path / "c.tgz").write_bytes(code)
    config = RunnerConfig(
        state_dir=tmp_path / "state",
        max_members=2,
        code_cache_dir=tmp_path / "cache" if cached else None,
    )
    runner = Runner(config)
    try:
        runner.submit(
            JobSpec(run_id="r", argv=["true"], code=CodeRef(sha256=sha(code), size=len(code)))
        )
        with pytest.raises(UnsafeArchive, match="more than 2 members"):
            runner.use_code_file(tmp_path / "c.tgz")
    finally:
        runner.close()
