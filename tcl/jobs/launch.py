"""`python -m tcl.jobs.launch KEY CONFIG.yaml OUT_DIR [options] [key=value ...]`.

Flags only; the protocol lives in tcl.jobs.bootstrap. CONFIG may be `-` for the defaults.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tcl.jobs import deps

if TYPE_CHECKING:
    from tcl.jobs.bootstrap import LaunchOptions


def parse(argv: list[str]) -> LaunchOptions:
    # Imported here, not above: bootstrap imports omegaconf and JAX, which main checks for first.
    from tcl.jobs.bootstrap import LaunchOptions

    p = argparse.ArgumentParser(prog="python -m tcl.jobs.launch", description=__doc__)
    p.add_argument("key", help="registered job key, e.g. gpt/train")
    p.add_argument("config", help="config YAML, or - for the defaults")
    p.add_argument("out_dir", type=Path, help="root of checkpoints/, status/, logs/, results/")
    p.add_argument("overrides", nargs="*", help="key=value config overrides (a/b=1 or a.b=1)")
    p.add_argument("--run-id", help="run id (default: $TCL_RUN_ID, else a timestamp)")
    p.add_argument("--name", help="job name (default: the key with / → -)")
    p.add_argument("--project", default="default")
    p.add_argument("--group", default="default")
    p.add_argument("--restore", help="checkpoint path relative to OUT_DIR/checkpoints")
    p.add_argument("--fresh", action="store_true", help="delete this run's checkpoints first")
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_intermixed_args(argv)
    return LaunchOptions(
        key=a.key,
        config_path=None if a.config == "-" else Path(a.config),
        out_dir=a.out_dir,
        overrides=tuple(a.overrides),
        run_id=a.run_id,
        name=a.name,
        project=a.project,
        group=a.group,
        restore=a.restore,
        fresh=a.fresh,
        probe=a.probe,
    )


def main(argv: list[str] | None = None) -> int:
    deps.use_lent()
    lacking = deps.missing()
    if lacking:
        print(deps.explain(lacking), file=sys.stderr)
        return 2
    from tcl.jobs.bootstrap import launch
    from tcl.jobs.errors import JobsError

    # force: importing jax/absl has already configured the root logger. Our own loggers
    # (progress, metrics) at INFO; libraries (Orbax narrates every save) at WARNING. The level
    # is in each line: the dashboard colours lines by it, not by stream (all go to stderr).
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s", force=True
    )
    logging.getLogger("tcl").setLevel(logging.INFO)
    try:
        opts = parse(sys.argv[1:] if argv is None else argv)
        return launch(opts)
    except JobsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
