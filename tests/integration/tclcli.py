"""The real `tcl` command run as a user would: its own HOME, state dir and config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

TCL = str(Path(sys.executable).parent / "tcl")


@dataclass
class TclEnv:
    home: Path
    config: Path
    repo: Path  # where commands run (the shipped repo)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self.home),
            "TCL_STATE_DIR": str(self.home / "state"),
            "TCL_CONFIG": str(self.config),
            "NO_COLOR": "1",
            "COLUMNS": "200",
        }

    def tcl(
        self, *args: str, check: bool = True, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [TCL, *args],
            cwd=self.repo,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            pytest.fail(f"tcl {' '.join(args)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    def tcl_json(self, *args: str) -> Any:
        # --json is an option of the command: it goes before a `--` that starts a job's argv
        cut = args.index("--") if "--" in args else len(args)
        return json.loads(self.tcl(*args[:cut], "--json", *args[cut:]).stdout)
