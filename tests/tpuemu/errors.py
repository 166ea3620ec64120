"""Errors as Google APIs send them over REST: ``{"error": {code, message, status, details}}``.

``google.api_core`` picks the exception class from the HTTP status (404 → NotFound,
409 → AlreadyExists, 400 → BadRequest/InvalidArgument ...), so the HTTP status and the
``google.rpc.Code`` below must agree as they do on the real service.
"""

from __future__ import annotations

from typing import Any

# google.rpc.Code name -> (number, HTTP status), from google/rpc/code.proto.
CODES: dict[str, tuple[int, int]] = {
    "CANCELLED": (1, 499),
    "UNKNOWN": (2, 500),
    "INVALID_ARGUMENT": (3, 400),
    "DEADLINE_EXCEEDED": (4, 504),
    "NOT_FOUND": (5, 404),
    "ALREADY_EXISTS": (6, 409),
    "PERMISSION_DENIED": (7, 403),
    "RESOURCE_EXHAUSTED": (8, 429),
    "FAILED_PRECONDITION": (9, 400),
    "ABORTED": (10, 409),
    "OUT_OF_RANGE": (11, 400),
    "UNIMPLEMENTED": (12, 501),
    "INTERNAL": (13, 500),
    "UNAVAILABLE": (14, 503),
    "UNAUTHENTICATED": (16, 401),
}


class ApiError(Exception):
    """An error the emulated API answers with (or puts into a failed operation)."""

    def __init__(self, status: str, message: str, details: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details or []

    @property
    def code(self) -> int:
        return CODES[self.status][0]

    @property
    def http_status(self) -> int:
        return CODES[self.status][1]

    def rpc_status(self) -> dict[str, Any]:
        """As a ``google.rpc.Status`` (what an Operation's ``error`` holds)."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out

    def body(self) -> dict[str, Any]:
        """The JSON body of the HTTP error response."""
        return {
            "error": {
                "code": self.http_status,
                "message": self.message,
                "status": self.status,
                "details": self.details,
            }
        }


def bad_request(violations: list[str]) -> ApiError:
    """400 INVALID_ARGUMENT for a malformed body, with a ``google.rpc.BadRequest`` detail."""
    return ApiError(
        "INVALID_ARGUMENT",
        "\n".join(violations),
        [
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"description": v} for v in violations],
            }
        ],
    )


def not_found(name: str) -> ApiError:
    return ApiError("NOT_FOUND", f"Resource '{name}' was not found", [_info("RESOURCE_NOT_FOUND")])


def _info(reason: str) -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "tpu.googleapis.com",
    }


def invalid(message: str, field: str | None = None) -> ApiError:
    """400 INVALID_ARGUMENT naming ``field`` (a camelCase path) in a BadRequest detail."""
    details: list[dict[str, Any]] = []
    if field is not None:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": field, "description": message}],
            }
        )
    return ApiError("INVALID_ARGUMENT", message, details)
