"""An attempt's dir on the cluster marked ended, and the ended ones past their retention removed
(the backend's ``release``, once every event of the attempt is kept on the workstation).

argv: ATTEMPT_DIR RETENTION_S. ``ATTEMPT_DIR`` is ``<work>/tcl/runs/<run id>/<attempt>``; its
``.ended`` is touched, then every attempt dir under the same ``runs`` dir whose ``.ended`` is
older than ``RETENTION_S`` is removed (this one at once when it is 0), and run dirs left empty
with them. An attempt dir without ``.ended`` (a run not released: still running, or released
by an older tcl) is left.

Then the code tarballs beside ``runs`` (``<work>/tcl/code/<sha256>.tar.gz``) that no attempt
dir left names (its ``spec.json``'s ``code.sha256``) and that are older than the retention (and
than ``CODE_MIN_AGE_S``: a tarball shipped for a run whose dir is not written yet) are evicted.
The spec files are read only when some tarball is old enough to go.
Nothing else is touched. stdout: one JSON line ``{"removed": N, "evicted": M, "error": ""}``.

Standard library only, and nothing past Python 3.7 at run time: the login node's interpreter
runs it, where tcl is not installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time

ENDED = ".ended"
SPEC = "spec.json"
CODE_SUFFIX = ".tar.gz"
CODE_MIN_AGE_S = 3600.0


def main(argv: list[str]) -> int:
    attempt_dir, retention_s = os.path.realpath(argv[0]), float(argv[1])
    runs = os.path.dirname(os.path.dirname(attempt_dir))
    if os.path.basename(runs) != "runs" or not os.path.isdir(attempt_dir):
        answer = {"removed": 0, "evicted": 0, "error": f"not an attempt dir: {attempt_dir}"}
        print(json.dumps(answer))
        return 0
    with open(os.path.join(attempt_dir, ENDED), "a"):
        os.utime(os.path.join(attempt_dir, ENDED))
    removed = 0
    errors = []
    now = time.time()
    for run in os.scandir(runs):
        if not run.is_dir(follow_symlinks=False):
            continue
        for attempt in os.scandir(run.path):
            marker = os.path.join(attempt.path, ENDED)
            try:
                ended = os.stat(marker).st_mtime
            except OSError:
                continue  # not released: left alone
            if now - ended >= retention_s and attempt.is_dir(follow_symlinks=False):
                try:
                    shutil.rmtree(attempt.path)
                    removed += 1
                except OSError as e:
                    errors.append(str(e))
        with contextlib.suppress(OSError):
            os.rmdir(run.path)  # empty once its attempts went
    code = os.path.join(os.path.dirname(runs), "code")
    old = _old_tarballs(code, max(retention_s, CODE_MIN_AGE_S), now)
    # the specs are read only when a tarball is old enough to go: most releases find none
    # (a tarball is touched each time a run uses it), and a cluster keeps thousands of runs
    evicted = _evict_code(old, _named_code(runs), errors) if old else 0
    answer = {"removed": removed, "evicted": evicted, "error": "; ".join(errors)[:2000]}
    print(json.dumps(answer))
    return 0


def _named_code(runs: str) -> set[str]:
    """The sha256 of the code every attempt dir under ``runs`` names (its spec.json)."""
    named: set[str] = set()
    for run in os.scandir(runs):
        if not run.is_dir(follow_symlinks=False):
            continue
        for attempt in os.scandir(run.path):
            try:
                with open(os.path.join(attempt.path, SPEC), encoding="utf-8") as f:
                    spec = json.loads(f.readline() or "{}")
            except (OSError, ValueError):
                continue
            sha = (spec.get("code") or {}).get("sha256") if isinstance(spec, dict) else None
            if isinstance(sha, str):
                named.add(sha)
    return named


def _old_tarballs(code: str, min_age_s: float, now: float) -> dict[str, str]:
    """The tarballs in ``code`` older than ``min_age_s``: their sha256 -> their path."""
    old: dict[str, str] = {}
    try:
        entries = list(os.scandir(code))
    except OSError:
        return old  # no code shipped yet
    for e in entries:
        if not e.name.endswith(CODE_SUFFIX):
            continue
        with contextlib.suppress(OSError):
            if e.is_file(follow_symlinks=False) and now - e.stat().st_mtime >= min_age_s:
                old[e.name[: -len(CODE_SUFFIX)]] = e.path
    return old


def _evict_code(old: dict[str, str], named: set[str], errors: list[str]) -> int:
    """Remove the tarballs of ``old`` that no run names."""
    evicted = 0
    for sha, path in old.items():
        if sha in named:
            continue
        try:
            os.unlink(path)
            evicted += 1
        except OSError as err:
            errors.append(str(err))
    return evicted


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
