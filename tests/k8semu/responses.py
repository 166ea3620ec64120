"""JSON responses: Kubernetes sends ``application/json`` bodies, Status bodies for errors."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse


def as_json(body: dict[str, Any], code: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=code)
