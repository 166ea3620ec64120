"""The host's cache of extracted code trees: atomic, shared, and never written through a job."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tarfile
import threading
from pathlib import Path

import pytest

from tcl.runner import code as codemod
from tcl.runner.codecache import CodeCache
from tcl.runner.errors import StorageError, UnsafeArchive
from tests.unit.runner.test_code import BAD, add_file, add_special, make_tar

FILES = {"pkg/main.py": b"print(1)\n", "pkg/data/x.txt": b"x" * 5000, "run.sh": b"#!/bin/sh\n"}


def good_tar(path: Path) -> tuple[Path, str]:
    def build(tar: tarfile.TarFile) -> None:
        for name, data in FILES.items():
            add_file(tar, name, data)
        add_special(tar, "pkg/alias.py", tarfile.SYMTYPE, "main.py")

    make_tar(path, build)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = f"-> {os.readlink(p)}"
        else:
            out[rel] = p.read_bytes() if p.is_file() else "d"
    return out


def test_add_then_materialise(tmp_path: Path) -> None:
    archive, sha = good_tar(tmp_path / "c.tgz")
    cache = CodeCache(tmp_path / "cache")
    assert cache.tree(sha) is None
    tree = cache.add(sha, archive, 10**6)
    assert tree == tmp_path / "cache" / "trees" / sha and cache.tree(sha) == tree
    work = tmp_path / "work"
    assert cache.materialise(sha, work) == 6  # 2 dirs, 3 files, 1 link
    assert snapshot(work) == snapshot(tree)
    assert (work / "pkg/main.py").read_bytes() == b"print(1)\n"
    assert os.readlink(work / "pkg/alias.py") == "main.py"
    assert (work / "pkg/main.py").stat().st_mode & stat.S_IWUSR  # the job's copy is writable
    assert (work / "pkg/main.py").stat().st_ino != (tree / "pkg/main.py").stat().st_ino
    assert sorted(os.listdir(cache.trees)) == [sha]  # no temp dir left


def test_job_writes_do_not_reach_the_cache_or_the_next_job(tmp_path: Path) -> None:
    archive, sha = good_tar(tmp_path / "c.tgz")
    cache = CodeCache(tmp_path / "cache")
    tree = cache.add(sha, archive, 10**6)
    before = snapshot(tree)
    first = tmp_path / "job1"
    cache.materialise(sha, first)
    with open(first / "pkg/main.py", "r+b") as f:  # in place, same inode: the dangerous case
        f.write(b"CORRUPT")
    with open(first / "pkg/data/x.txt", "wb") as f:  # truncate in place
        f.write(b"")
    os.chmod(first / "run.sh", 0o777)
    (first / "run.sh").unlink()
    (first / "new.txt").write_bytes(b"new")
    assert snapshot(tree) == before
    second = tmp_path / "job2"
    cache.materialise(sha, second)
    assert snapshot(second) == before
    # Materialising over a dirty dir (a retried install) restores the shipped files.
    cache.materialise(sha, first)
    assert (first / "pkg/main.py").read_bytes() == b"print(1)\n"


def test_copy_never_writes_through_links_in_the_working_dir(tmp_path: Path) -> None:
    """A retried install finds what a job left: links where the tree has a directory, a file
    or a nested directory are replaced by the tree's entries, and nothing lands outside."""
    archive, sha = good_tar(tmp_path / "c.tgz")
    cache = CodeCache(tmp_path / "cache")
    tree = cache.add(sha, archive, 10**6)
    outside = tmp_path / "outside"
    (outside / "data").mkdir(parents=True)
    (outside / "run.sh").write_bytes(b"outside file")
    work = tmp_path / "work"
    work.mkdir()
    (work / "pkg").symlink_to(outside)  # where the tree has the directory pkg/
    (work / "run.sh").symlink_to(outside / "run.sh")  # where the tree has a file
    cache.materialise(sha, work)
    assert sorted(p.name for p in outside.rglob("*")) == ["data", "run.sh"]
    assert (outside / "run.sh").read_bytes() == b"outside file"
    assert not (work / "pkg").is_symlink() and not (work / "run.sh").is_symlink()
    assert snapshot(work) == snapshot(tree)
    # One level down: the job made pkg/data a link; a second copy replaces it too.
    shutil.rmtree(work / "pkg" / "data")
    (work / "pkg" / "data").symlink_to(outside / "data")
    cache.materialise(sha, work)
    assert list((outside / "data").iterdir()) == []
    assert snapshot(work) == snapshot(tree)


def test_concurrent_first_extraction_extracts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, sha = good_tar(tmp_path / "c.tgz")
    calls: list[int] = []
    real = codemod.extract
    gate = threading.Barrier(2)

    def counting(*args: object, **kwargs: object) -> int:
        calls.append(threading.get_ident())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(codemod, "extract", counting)
    results: list[Path | BaseException] = []

    def job() -> None:
        cache = CodeCache(tmp_path / "cache")  # each job has its own object, like two runners
        gate.wait()
        try:
            results.append(cache.add(sha, archive, 10**6))
        except BaseException as e:  # pragma: no cover - reported by the assert below
            results.append(e)

    threads = [threading.Thread(target=job) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [tmp_path / "cache/trees" / sha] * 2
    assert len(calls) == 1
    assert sorted(os.listdir(tmp_path / "cache/trees")) == [sha]


@pytest.mark.parametrize("case", ["dotdot", "symlink-out", "through-link", "chardev"])
def test_hostile_tarball_is_refused_and_leaves_nothing(tmp_path: Path, case: str) -> None:
    archive = make_tar(tmp_path / "bad.tgz", BAD[case])
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    cache = CodeCache(tmp_path / "cache")
    with pytest.raises(UnsafeArchive):
        cache.add(sha, archive, 10**6)
    assert cache.tree(sha) is None
    assert os.listdir(cache.trees) == []
    assert not (tmp_path / "escaped.txt").exists()


def test_size_limit_and_interrupted_extraction_leave_no_tree(tmp_path: Path) -> None:
    archive, sha = good_tar(tmp_path / "c.tgz")
    cache = CodeCache(tmp_path / "cache")
    with pytest.raises(UnsafeArchive, match="more than 100 bytes"):
        cache.add(sha, archive, 100)
    (tmp_path / "trunc.tgz").write_bytes(archive.read_bytes()[:60])
    with pytest.raises(UnsafeArchive):
        cache.add(sha, tmp_path / "trunc.tgz", 10**6)
    assert cache.tree(sha) is None and os.listdir(cache.trees) == []
    assert cache.add(sha, archive, 10**6).is_dir()  # a later good upload still works


def test_names_that_are_not_hashes_are_never_paths(tmp_path: Path) -> None:
    cache = CodeCache(tmp_path / "cache")
    (tmp_path / "cache/trees/../../evil").mkdir(parents=True)
    assert cache.tree("../../evil") is None
    assert cache.tree("A" * 64) is None
    with pytest.raises(StorageError, match="not in the cache"):
        cache.materialise("0" * 64, tmp_path / "w")
    with pytest.raises(ValueError):
        cache.add("../x", tmp_path / "c.tgz", 10)


async def test_runners_sharing_a_cache_skip_upload_and_extraction(tmp_path: Path) -> None:
    """Through the runner API: the first runner extracts an upload into the cache, the next
    one installs the same code with POST /api/code/cached; unknown code is 404."""
    import httpx

    from tcl.runner.api import CodeRef, JobSpec, RunnerState
    from tcl.runner.app import create_app
    from tcl.runner.client import RunnerAPIError, RunnerClient
    from tcl.runner.service import Runner, RunnerConfig
    from tests.unit.runner.conftest import TOKEN, sha, tarball

    code = tarball({"main.py": b"print('hi')\n", "lib/util.py": b"X = 1\n"})
    spec = JobSpec(run_id="r", argv=["true"], code=CodeRef(sha256=sha(code), size=len(code)))
    cache_dir = tmp_path / "cache"

    async def runner_client(name: str, cache: Path | None) -> tuple[Runner, RunnerClient]:
        r = Runner(RunnerConfig(state_dir=tmp_path / name, code_cache_dir=cache))
        c = RunnerClient(
            "http://runner", TOKEN, transport=httpx.ASGITransport(app=create_app(r, TOKEN))
        )
        await c.submit(spec)
        return r, c

    first, c1 = await runner_client("one", cache_dir)
    with pytest.raises(RunnerAPIError) as e:
        await c1.use_cached_code(sha(code))
    assert (e.value.status, e.value.error) == (404, "code_not_cached")
    assert (await c1.upload_code(code, sha(code))).state is RunnerState.READY
    assert (cache_dir / "trees" / sha(code) / "lib/util.py").read_bytes() == b"X = 1\n"
    (first.workdir / "lib/util.py").write_bytes(b"X = 2\n")  # job 1 edits its copy

    second, c2 = await runner_client("two", cache_dir)
    assert (await c2.use_cached_code(sha(code))).state is RunnerState.READY
    assert (await c2.use_cached_code(sha(code))).state is RunnerState.READY  # a retry
    assert (second.workdir / "lib/util.py").read_bytes() == b"X = 1\n"
    assert (second.workdir / "main.py").read_bytes() == b"print('hi')\n"

    third, c3 = await runner_client("three", None)  # a runner without a cache
    with pytest.raises(RunnerAPIError) as e:
        await c3.use_cached_code(sha(code))
    assert e.value.status == 404 and "no code cache" in str(e.value.detail)
    with pytest.raises(RunnerAPIError) as e:
        await c3.use_cached_code("0" * 64)  # not the spec's code
    assert e.value.status == 400
    for r, c in ((first, c1), (second, c2), (third, c3)):
        await c.aclose()
        r.close()


async def test_premounted_tree_is_not_copied_again(tmp_path: Path) -> None:
    """The docker executor mounted an overlay of the tree as the working dir: no copy; a spec
    with its own working_dir still gets one."""
    from tcl.runner.api import CodeRef, JobSpec, RunnerState
    from tcl.runner.service import Runner, RunnerConfig
    from tests.unit.runner.conftest import sha, tarball

    code = tarball({"main.py": b"print('hi')\n"})
    (tmp_path / "c.tgz").write_bytes(code)
    CodeCache(tmp_path / "cache").add(sha(code), tmp_path / "c.tgz", 10**6)
    ref = CodeRef(sha256=sha(code), size=len(code))
    for working_dir, copied in ((None, False), (str(tmp_path / "own"), True)):
        state = tmp_path / f"state-{copied}"
        (state / "work").mkdir(parents=True)
        (state / "work" / "mounted.txt").write_text("the overlay")
        r = Runner(
            RunnerConfig(
                state_dir=state, code_cache_dir=tmp_path / "cache", premounted_code=sha(code)
            )
        )
        r.submit(JobSpec(run_id="r", argv=["true"], code=ref, working_dir=working_dir))
        assert await r.use_cached_code(sha(code)) is RunnerState.READY
        assert (r.workdir / "main.py").exists() is copied
        r.close()
