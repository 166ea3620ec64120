"""The retry options ``tcl submit`` and ``tcl matrix add`` share."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tcl.control.lifecycle.retry_policy import RetryPolicy

RETRY_HELP = "Attempts that may fail, in all (1: no retry); a preemption is not counted."
RETRY_ON_HELP = "An exit code that retries (repeatable; default: any non-zero)."
RETRY_BACKOFF_HELP = "Seconds before the first retry; doubles after each failed attempt."


def retry_policy(
    attempts: int, exit_codes: list[int] | None, backoff_s: float
) -> RetryPolicy | None:
    """None when nothing retries (one attempt; a preempted run is still placed again by a
    matrix's scheduler)."""
    from tcl.control.lifecycle.retry_policy import RetryPolicy

    if attempts <= 1 and not exit_codes:
        return None
    return RetryPolicy(
        max_attempts=attempts, exit_codes=sorted(set(exit_codes or [])), backoff_s=backoff_s
    )
