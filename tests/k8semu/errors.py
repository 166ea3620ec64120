"""API errors as the Kubernetes API server sends them: ``kind: Status`` bodies.

``ApiError`` carries code, reason, message and details; ``body()`` renders the JSON.
The helpers build the messages the real server uses (apimachinery ``errors.go``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.k8semu.resources import Resource


@dataclass
class ApiError(Exception):
    code: int
    reason: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            out["reason"] = self.reason
        out["details"] = self.details
        out["code"] = self.code
        return out


def _details(res: Resource, name: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if name:
        out["name"] = name
    if res.group:
        out["group"] = res.group
    out["kind"] = res.plural
    return out


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def no_route() -> ApiError:
    """What the server says for a path no installed API serves (an absent CRD group)."""
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(res: Resource, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name)
    )


def forbidden(
    res: Resource, verb: str, user: str, namespace: str, name: str | None, sub: str = ""
) -> ApiError:
    what = f'{res.qualified} "{name}"' if name else res.qualified
    resource = f"{res.plural}/{sub}" if sub else res.plural
    msg = (
        f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group '
        f'"{res.group}" in the namespace "{namespace}"'
    )
    return ApiError(403, "Forbidden", msg, _details(res, name))


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized", {})


def invalid(res: Resource, name: str, messages: list[str]) -> ApiError:
    """422 as for a schema failure: one cause per message, ``[a, b]`` when several."""
    joined = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    details = _details(res, name)
    details["kind"] = res.kind
    details["causes"] = [{"reason": "FieldValueInvalid", "message": m} for m in messages]
    kind = f"{res.kind}.{res.group}" if res.group else res.kind
    return ApiError(422, "Invalid", f'{kind} "{name}" is invalid: {joined}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message, {})


def webhook_denied(webhook: str, message: str) -> ApiError:
    """An admission webhook's refusal: code 400, no reason (apiserver ``ToStatusErr``)."""
    return ApiError(400, "", f'admission webhook "{webhook}" denied the request: {message}', {})
