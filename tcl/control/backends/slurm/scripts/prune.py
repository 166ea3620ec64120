"""An attempt's dir on the cluster marked ended, and the ended ones past their retention removed
(the backend's ``release``, once every event of the attempt is kept on the workstation).

argv: ATTEMPT_DIR RETENTION_S. ``ATTEMPT_DIR`` is ``<work>/tcl/runs/<run id>/<attempt>``; its
``.ended`` is touched, then every attempt dir under the same ``runs`` dir whose ``.ended`` is
older than ``RETENTION_S`` is removed (this one at once when it is 0), and run dirs left empty
with them. Nothing outside that ``runs`` dir is touched, and an attempt dir without ``.ended``
(a run not released: still running, or released by an older tcl) is left. stdout: one JSON line
``{"removed": N, "error": ""}``.

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


def main(argv: list[str]) -> int:
    attempt_dir, retention_s = os.path.realpath(argv[0]), float(argv[1])
    runs = os.path.dirname(os.path.dirname(attempt_dir))
    if os.path.basename(runs) != "runs" or not os.path.isdir(attempt_dir):
        print(json.dumps({"removed": 0, "error": f"not an attempt dir: {attempt_dir}"}))
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
    print(json.dumps({"removed": removed, "error": "; ".join(errors)[:2000]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
