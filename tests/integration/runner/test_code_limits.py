"""A million-member archive bomb refused at the member count limit in flat memory: 20,000
members read before the refusal (1.5 s under tracemalloc), the size where holding every TarInfo,
as tarfile does, would show in the peak. The small count-limit test is in tests/unit."""

from __future__ import annotations

import tarfile
import zlib
from pathlib import Path

from tests.unit.runner.test_code_limits import header, refusal_and_peak


def test_a_million_members_are_refused_at_the_count_limit_in_flat_memory(
    tmp_path: Path,
) -> None:
    # A million copies of one directory header, gzipped: 512 MB of tar in ~5 MB of file.
    one = header("d", tarfile.DIRTYPE)
    gz = zlib.compressobj(1, zlib.DEFLATED, 31)
    archive = tmp_path / "many.tgz"
    with open(archive, "wb") as f:
        for _ in range(1_000_000 // 10_000):
            f.write(gz.compress(one * 10_000))
        f.write(gz.compress(b"\0" * 1024) + gz.flush())
    work = tmp_path / "work"
    error, peak = refusal_and_peak(archive, work, max_members=20_000)
    assert error is not None and "more than 20000 members" in str(error)
    # Holding 20,000 TarInfos (what tarfile does) alone takes ~7.5 MiB.
    assert peak < 5 * 1024**2, f"peak {peak / 1024**2:.1f} MiB"
    assert not work.exists()
