"""Auto batch-size search and cache.

The probe here is a test double at the probe boundary (a function reporting OOM above a
threshold): a real out-of-memory needs an accelerator. The real subprocess probe is exercised
in tests/integration/jobs/test_launcher.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tcl.jobs import batchsize
from tcl.jobs.batchsize import CANDIDATES, ProbeOutcome, classify, resolve, search
from tcl.jobs.errors import BatchSizeError


class ThresholdProbe:
    """Fits up to `limit`, runs out of memory above it; records what was probed."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls: list[int] = []

    def __call__(self, size: int) -> ProbeOutcome:
        self.calls.append(size)
        return ProbeOutcome.FITS if size <= self.limit else ProbeOutcome.OOM


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 9, 10, 15, 100, 511, 1024, 5000])
def test_search_finds_the_largest_fitting_candidate(limit: int) -> None:
    probe = ThresholdProbe(limit)
    expected = max(c for c in CANDIDATES if c <= limit)
    assert search(probe) == expected
    # A binary search: at most ceil(log2(n + 1)) probes, never the same size twice.
    assert len(probe.calls) <= math.ceil(math.log2(len(CANDIDATES) + 1))
    assert len(set(probe.calls)) == len(probe.calls)


def test_nothing_fits_is_an_error() -> None:
    with pytest.raises(BatchSizeError, match="no batch size fits"):
        search(ThresholdProbe(0))


@pytest.mark.parametrize(
    "output",
    [
        # GPU, XLA's BFC allocator (seen on an H200 by scripts/gpu-check.sh's batchsize row)
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying "
        "to allocate 6442450944 bytes.",
        # GPU, a failed cuMemAlloc (preallocation included)
        "E external/xla/xla/stream_executor/cuda/cuda_driver.cc: failed to alloc 2147483648 "
        "bytes on host: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
        # TPU, at compile time
        "XlaRuntimeError: XLA:TPU compile permanent error. Ran out of memory in memory space "
        "hbm. Used 21.95G of 15.48G hbm. Exceeded hbm capacity by 6.47G.",
        # TPU, at run time
        "Error allocating device buffer: Attempting to allocate 1.00G. That was not possible. "
        "There are 512.00M free.",
    ],
)
def test_classify_recognises_gpu_and_tpu_out_of_memory_wordings(output: str) -> None:
    assert classify(1, "Traceback (most recent call last):\n" + output) is ProbeOutcome.OOM


def test_classify_recognises_xla_oom_and_other_failures() -> None:
    oom = "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory"
    assert classify(1, oom) is ProbeOutcome.OOM
    assert classify(0, "step 3 done") is ProbeOutcome.FITS
    with pytest.raises(BatchSizeError, match="exit 1"):
        classify(1, "Traceback ...\nValueError: bad config")


def test_cache_skips_the_search_for_the_same_model_and_chip(tmp_path: Path) -> None:
    cache = tmp_path / "bs.json"
    key = batchsize.cache_key('{"d_model": 64}', "gpu:H100", 8)
    first = ThresholdProbe(40)
    assert resolve(key, first, "gpu:H100", path=cache) == (32, False)
    assert first.calls

    def must_not_probe(size: int) -> ProbeOutcome:
        raise AssertionError("probed despite a cache hit")

    assert resolve(key, must_not_probe, "gpu:H100", path=cache) == (32, True)
    # Another chip (or model) is another key: it searches again.
    other = batchsize.cache_key('{"d_model": 64}', "gpu:A100", 8)
    assert other != key
    second = ThresholdProbe(12)
    assert resolve(other, second, "gpu:A100", path=cache) == (10, False)
    assert second.calls


def test_a_corrupt_cache_is_ignored(tmp_path: Path) -> None:
    cache = tmp_path / "bs.json"
    cache.write_text("{not json")
    assert batchsize.cached("k", cache) is None
    batchsize.store("k", 8, "cpu", cache)
    assert batchsize.cached("k", cache) == 8
