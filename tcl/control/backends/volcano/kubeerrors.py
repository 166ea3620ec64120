"""The Kubernetes client's failures as tcl errors, one clear line each.

Every call into the ``kubernetes`` client sits in ``with translated(what, namespace):`` (or under
``@translated(...)``), where ``what`` is the verb and resource as a user reads them (``"create
vcjobs"``, ``"get pvc training-pvc"``). What comes out::

    ApiException 401                      KubeApiError       the credentials were refused
    ApiException 403                      KubeApiError       what you may not do, where, as whom
    ApiException 404, an object named     KubeNotFoundError  "PVC X not found in namespace Y"
    ApiException 404, no such resource    VolcanoMissingError (batch.volcano.sh jobs) or
                                          KubeNotFoundError  (any other resource path)
    ApiException 409 AlreadyExists        KubeAlreadyExistsError
    ApiException 422 Invalid              KubeApiError       each cause's field and message
    ApiException 502/503/504, urllib3     KubeUnreachableError (an AgentUnreachableError:
      connection errors (MaxRetryError)     callers retry it like a dropped host)
    other ApiException                    KubeApiError       status, reason, the server's message
    kubernetes.config.ConfigException     ConfigError        the kubeconfig cannot be used

The client answers errors as ``ApiException`` (``status``, ``reason``, ``body``: the text of a
``kind: Status`` object, or plain text such as ``404 page not found``); ``kubernetes`` is only
imported when an error is being translated, so this module loads without the ``volcano`` extra.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tcl.control.errors import AgentUnreachableError, ConfigError, TclError

VOLCANO_GROUP = "batch.volcano.sh"
VOLCANO_MISSING = "Volcano is not installed in this cluster (no batch.volcano.sh/v1alpha1 jobs)"
UNREACHABLE_STATUSES = frozenset({502, 503, 504})
_KIND_NAMES = {"persistentvolumeclaims": "PVC", "jobs": "vcjob", "pods": "pod", "secrets": "secret"}
_USER = re.compile(r'User "([^"]+)"')


class KubeApiError(TclError):
    """The Kubernetes API server refused a request; ``status`` is its HTTP status (0: TLS)."""

    def __init__(self, message: str, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class KubeNotFoundError(KubeApiError):
    """The object, or the resource type itself, does not exist (404)."""


class VolcanoMissingError(KubeNotFoundError):
    """The cluster serves no ``batch.volcano.sh/v1alpha1`` jobs: Volcano is not installed."""


class KubeAlreadyExistsError(KubeApiError):
    """An object of that name exists already (409 AlreadyExists)."""


class KubeUnreachableError(AgentUnreachableError):
    """The API server does not answer (refused, timed out, 502/503/504): worth a retry."""


@dataclass(frozen=True)
class Status:
    """What tcl reads of a ``kind: Status`` body (empty fields when the body is not one)."""

    message: str = ""
    reason: str = ""
    name: str = ""
    kind: str = ""
    group: str = ""
    causes: tuple[tuple[str, str], ...] = field(default=())  # (field, message)

    @classmethod
    def parse(cls, body: object) -> Status:
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        if not isinstance(body, str):
            return cls()
        try:
            doc = json.loads(body)
        except ValueError:
            return cls(message=body.strip())
        if not isinstance(doc, dict):
            return cls(message=body.strip())
        details = doc.get("details") or {}
        causes = tuple(
            (str(c.get("field", "")), str(c.get("message", "")))
            for c in details.get("causes") or ()
            if isinstance(c, dict)
        )
        return cls(
            message=str(doc.get("message", "")),
            reason=str(doc.get("reason", "")),
            name=str(details.get("name", "")),
            kind=str(details.get("kind", "")),
            group=str(details.get("group", "")),
            causes=causes,
        )


@contextmanager
def translated(what: str, namespace: str, *, server: str | None = None) -> Iterator[None]:
    """Run a client call, raising tcl errors for the client's (see the module docstring).

    ``what`` is the call as a user reads it (``"create vcjobs"``); ``server`` the API server's
    URL when known (otherwise read from a connection error where it can be).
    """
    try:
        yield
    except TclError:
        raise
    except Exception as e:
        translation = translate(e, what, namespace, server)
        if translation is None:
            raise
        raise translation from e


def translate(
    e: BaseException, what: str, namespace: str, server: str | None = None
) -> TclError | None:
    """The tcl error for a client exception; None when ``e`` is not the client's."""
    from kubernetes.client.exceptions import ApiException
    from kubernetes.config.config_exception import ConfigException

    if isinstance(e, ApiException):
        return _api_error(int(e.status or 0), str(e.reason or ""), e.body, what, namespace, server)
    if isinstance(e, ConfigException):
        return ConfigError(f"cannot use the Kubernetes config (kubeconfig/context): {e}")
    if _is_connection_error(e):
        where = server or _server_of(e) or "the configured address"
        return KubeUnreachableError(
            f"the Kubernetes API server at {where} does not answer ({what}): {_cause(e)}"
        )
    return None


def _api_error(
    status: int, reason: str, body: object, what: str, namespace: str, server: str | None
) -> TclError:
    st = Status.parse(body)
    said = st.message or reason or f"HTTP {status}"
    at = f" at {server}" if server else ""
    if status == 401:
        return KubeApiError(
            f"the Kubernetes API server{at} refused your credentials ({what}): renew the token or"
            " certificate of your kubeconfig's user",
            status,
            reason,
        )
    if status == 403:
        user = _USER.search(st.message)
        who = f" (you are {user.group(1)})" if user else ""
        return KubeApiError(
            f"your service account may not {what} in namespace {namespace}{who}", status, reason
        )
    if status == 404:
        return _not_found(st, what, namespace, status, reason)
    if status == 409 and st.reason == "AlreadyExists":
        return KubeAlreadyExistsError(
            f"{_object(st, what)} already exists in namespace {namespace}", status, reason
        )
    if status == 422 and st.causes:
        causes = "; ".join(f"{f}: {m}" if f else m for f, m in st.causes)
        refused = f"the API server refused to {what} as invalid: {causes}"
        return KubeApiError(refused, status, reason)
    if status in UNREACHABLE_STATUSES:
        return KubeUnreachableError(
            f"the Kubernetes API server{at} does not answer ({what}): {status} {said}"
        )
    if status == 0:  # the client's TLS failure (rest.py raises ApiException(status=0))
        return KubeApiError(f"TLS to the Kubernetes API server{at} failed ({what}): {said}")
    return KubeApiError(f"cannot {what} in namespace {namespace}: {status} {said}", status, reason)


def _not_found(st: Status, what: str, namespace: str, status: int, reason: str) -> TclError:
    if st.name:
        return KubeNotFoundError(
            f"{_object(st, what)} not found in namespace {namespace}", status, reason
        )
    # No object named: the resource path itself is unknown (its API group is not served)
    if st.group == VOLCANO_GROUP or "vcjob" in what or VOLCANO_GROUP in what:
        return VolcanoMissingError(VOLCANO_MISSING, status, reason)
    said = st.message or "the server could not find the requested resource"
    return KubeNotFoundError(f"cannot {what}: {said}", status, reason)


def _object(st: Status, what: str) -> str:
    kind = _KIND_NAMES.get(st.kind, st.kind) or what
    return f"{kind} {st.name}" if st.name else kind


def _is_connection_error(e: BaseException) -> bool:
    import urllib3.exceptions as u3

    connection = (u3.MaxRetryError, u3.NewConnectionError, u3.ProtocolError, u3.TimeoutError)
    return isinstance(e, (*connection, ConnectionError, TimeoutError))


def _server_of(e: BaseException) -> str | None:
    pool: Any = getattr(e, "pool", None)
    if pool is None or not getattr(pool, "host", None):
        return None
    return f"{pool.scheme}://{pool.host}:{pool.port}"


def _cause(e: BaseException) -> str:
    reason = getattr(e, "reason", None) or e
    text = str(reason)
    # urllib3 wraps the OS error: keep its last part ("[Errno 111] Connection refused")
    return text.rsplit(": ", 1)[-1] if "[Errno" in text else text
