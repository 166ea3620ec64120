"""A row's result, how a row's child process hands it back, and the table printed from them."""

from __future__ import annotations

import dataclasses
import enum
import json
import time
import traceback
from collections.abc import Callable
from typing import Any

RESULT_MARKER = "GPUCHECK_RESULT "


class Outcome(enum.StrEnum):
    OK = "ok"  # ran, and met its goal where it has one
    BELOW_GOAL = "below goal"  # ran, and missed its goal
    FAILED = "failed"  # did not run to the end: the reason says why
    SKIPPED = "skipped"  # nothing to run it on here (no GPU, no nvidia-smi): the reason says


@dataclasses.dataclass(frozen=True)
class RowResult:
    row: str
    outcome: Outcome
    summary: str  # one line: the figures that matter, or why it failed or was skipped
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "outcome": str(self.outcome)})

    @classmethod
    def from_json(cls, text: str) -> RowResult:
        data = json.loads(text)
        return cls(
            row=str(data["row"]),
            outcome=Outcome(data["outcome"]),
            summary=str(data["summary"]),
            figures=dict(data.get("figures") or {}),
            seconds=float(data.get("seconds") or 0.0),
        )


def emit(result: RowResult) -> None:
    """Print `result` as the row child's last line, for the parent to read."""
    print(RESULT_MARKER + result.to_json(), flush=True)


def parse(output: str) -> RowResult | None:
    """The result a row child printed, if it printed one."""
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_MARKER):
            return RowResult.from_json(line[len(RESULT_MARKER) :])
    return None


def table(results: list[RowResult]) -> str:
    """A fixed-width table, one line a row, the summary last (it may be long)."""
    head = ("row", "outcome", "time", "result")
    lines = [(r.row, str(r.outcome), f"{r.seconds:.0f} s", r.summary) for r in results]
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(3)]

    def fmt(cells: tuple[str, str, str, str]) -> str:
        return (
            "  ".join(c.ljust(w) for c, w in zip(cells[:3], widths, strict=True)) + "  " + cells[3]
        )

    rule = "-" * (sum(widths) + 6 + max(len(x[3]) for x in [head, *lines]))
    return "\n".join([fmt(head), rule, *(fmt(x) for x in lines)])


def run_row(row: str, check: Callable[[], RowResult]) -> int:
    """A row child's main: run `check`, time it, turn an exception into a FAILED result with
    its last line, and emit the result. Exit 0 unless the row failed."""
    t0 = time.perf_counter()
    try:
        result = check()
    except Exception as e:  # the row's own failure is its result, not a crash of the check
        traceback.print_exc()
        last = (str(e).strip().splitlines() or [""])[-1][:300]
        result = RowResult(row, Outcome.FAILED, f"{type(e).__name__}: {last}")
    result = dataclasses.replace(result, seconds=time.perf_counter() - t0)
    emit(result)
    return 1 if result.outcome is Outcome.FAILED else 0
