"""The OpenAPI 3.1 document of the runner API, generated from ``app.ROUTES`` and the pydantic
models of ``api.py`` (never written by hand).

Every route but the public ones (``ApiRoute.public``: the healthcheck) needs the bearer token
and answers 401 without it; a JSON body is required exactly when ``{}`` would not validate
(an empty body is read as ``{}``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from tcl import __version__
from tcl.runner.api import ErrorBody, Event, LogsQuery
from tcl.runner.app import ROUTES

REF = "#/components/schemas/{model}"
SECURITY_SCHEME = "bearerAuth"


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": REF.format(model=model.__name__)}


def _error_response() -> dict[str, Any]:
    return {"description": "Error", "content": {"application/json": {"schema": _ref(ErrorBody)}}}


def _body_required(model: type[BaseModel]) -> bool:
    return any(field.is_required() for field in model.model_fields.values())


def openapi() -> dict[str, Any]:
    models: set[type[BaseModel]] = {ErrorBody, Event}
    for r in ROUTES:
        models.update(m for m in (r.response, r.body) if m is not None)
    ordered = sorted(models, key=lambda m: m.__name__)
    _, defs = models_json_schema([(m, "validation") for m in ordered], ref_template=REF)
    paths: dict[str, dict[str, Any]] = {}
    for r in ROUTES:
        op: dict[str, Any] = {
            "summary": r.summary,
            "operationId": r.handler.__name__,
            "responses": {
                "200": {
                    "description": "OK",
                    "content": {"application/json": {"schema": _ref(r.response)}},
                }
            },
        }
        for status in r.errors:
            op["responses"][str(status)] = _error_response()
        if r.public:
            op["security"] = []
        else:
            op["responses"]["401"] = _error_response()
        if r.body is not None:
            op["requestBody"] = {
                "required": _body_required(r.body),
                "content": {"application/json": {"schema": _ref(r.body)}},
            }
        if r.raw_body is not None:
            op["requestBody"] = {
                "required": True,
                "content": {r.raw_body: {"schema": {"type": "string", "format": "binary"}}},
            }
            op["parameters"] = [
                {
                    "name": "X-Code-Sha256",
                    "in": "header",
                    "required": True,
                    "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                }
            ]
        if r.query is not None:
            op["parameters"] = _query_params(r.query)
        paths.setdefault(r.path, {})[r.method.lower()] = op
    paths["/api/logs"] = {
        "get": {
            "summary": "WebSocket: every Event past `after` as one JSON text message, as it "
            "happens; closed with 1000 once the job has ended and all were sent",
            "operationId": "logs",
            "parameters": _query_params(LogsQuery),
            "responses": {
                "101": {"description": "Switching to the WebSocket protocol"},
                "401": _error_response(),
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "tcl-runner", "version": __version__},
        "paths": paths,
        "security": [{SECURITY_SCHEME: []}],
        "components": {
            "schemas": defs.get("$defs", {}),
            "securitySchemes": {SECURITY_SCHEME: {"type": "http", "scheme": "bearer"}},
        },
    }


def _query_params(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    return [
        {"name": name, "in": "query", "required": False, "schema": prop}
        for name, prop in schema["properties"].items()
    ]
