"""What ``tcl matrix status`` shows: where each matrix stands, as typed records read where the
store is open (the ``tcl serve`` daemon, or the CLI itself when no daemon answers) and sent to
the CLI over the daemon's socket. The CLI only prints them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tcl.control.listingwire import Strict

if TYPE_CHECKING:
    from tcl.control.sweep.progress import MatrixSummary
    from tcl.control.sweep.queue import SweepQueue


class MatrixStatusRequest(Strict):
    name: str | None = None  # None: every matrix


class FailureRecord(Strict):
    job_id: str
    run_id: str | None
    ended_at: str | None  # ISO-8601 UTC
    error: str  # the last non-blank line of its last error ("" when none was kept)


class MatrixStatus(Strict):
    """One matrix's standing; :meth:`json_form` is ``tcl matrix status --json``'s (docs/cli.md)."""

    name: str
    created_at: str | None  # ISO-8601 UTC
    total: int
    counts: dict[str, int]  # every entry state, in the order states go, zeros included
    done_fraction: float
    runs_per_hour: float
    eta_s: float | None
    failures: list[FailureRecord]  # newest first

    @property
    def ended(self) -> int:
        """Entries done or failed (the progress bar's filled part)."""
        return self.counts["done"] + self.counts["failed"]

    def json_form(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class MatrixStatusListing(Strict):
    matrices: list[MatrixStatus]


def status_record(s: MatrixSummary) -> MatrixStatus:
    return MatrixStatus.model_validate(s.to_json())


def matrix_status(queue: SweepQueue, req: MatrixStatusRequest) -> MatrixStatusListing:
    """The named matrix (an unknown name raises ``SweepError``), or every one."""
    from tcl.control.sweep.progress import summary

    names = [req.name] if req.name is not None else [m.name for m in queue.matrices()]
    return MatrixStatusListing(matrices=[status_record(summary(queue, n)) for n in names])
