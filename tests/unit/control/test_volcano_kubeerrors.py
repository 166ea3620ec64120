"""The client's errors, built as the kubernetes client builds them, become one clear tcl line."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
import urllib3

from tcl.control.backends.volcano.kubeerrors import (
    VOLCANO_MISSING,
    KubeAlreadyExistsError,
    KubeApiError,
    KubeNotFoundError,
    KubeUnreachableError,
    VolcanoMissingError,
    translated,
)
from tcl.control.errors import AgentUnreachableError, ConfigError, TclError

if TYPE_CHECKING:
    from kubernetes.client.exceptions import ApiException

# The kubernetes client costs a fifth of a second to import: only the tests that run load it.


class FakeResponse:
    """What ApiException reads of the client's RESTResponse."""

    def __init__(self, status: int, reason: str, data: bytes) -> None:
        self.status = status
        self.reason = reason
        self.data = data
        self.headers = {"Content-Type": "application/json"}


def api_exception(status: int, reason: str, body: dict[str, Any] | str) -> ApiException:
    from kubernetes.client.exceptions import ApiException

    text = body if isinstance(body, str) else json.dumps(body)
    resp = FakeResponse(status, reason, text.encode())
    from_response = getattr(ApiException, "from_response", None)
    if from_response is None:  # clients before 33 raise ApiException(http_resp=...) directly
        return ApiException(http_resp=resp)
    try:
        from_response(http_resp=resp, body=text, data=None)
    except ApiException as e:
        return e
    raise AssertionError("from_response did not raise")


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def raised(e: BaseException, what: str = "create vcjobs", ns: str = "training") -> TclError:
    with pytest.raises(TclError) as info, translated(what, ns):
        raise e
    assert info.value.__cause__ is e
    return info.value


def test_403_names_the_verb_resource_namespace_and_user() -> None:
    msg = (
        'jobs.batch.volcano.sh is forbidden: User "system:serviceaccount:ci:tcl" cannot create'
        ' resource "jobs" in API group "batch.volcano.sh" in the namespace "training"'
    )
    e = api_exception(
        403, "Forbidden", status(403, "Forbidden", msg, group="batch.volcano.sh", kind="jobs")
    )
    err = raised(e)
    assert type(err) is KubeApiError and err.status == 403
    assert str(err) == (
        "your service account may not create vcjobs in namespace training"
        " (you are system:serviceaccount:ci:tcl)"
    )


def test_404_without_a_name_on_the_vcjob_path_is_volcano_missing() -> None:
    msg = "the server could not find the requested resource"
    e = api_exception(404, "Not Found", status(404, "NotFound", msg))
    err = raised(e)
    assert isinstance(err, VolcanoMissingError)
    assert str(err) == VOLCANO_MISSING


def test_404_page_not_found_text_is_volcano_missing() -> None:
    err = raised(api_exception(404, "Not Found", "404 page not found\n"), "list vcjobs")
    assert isinstance(err, VolcanoMissingError)


def test_404_named_pvc() -> None:
    body = status(
        404,
        "NotFound",
        'persistentvolumeclaims "training-pvc" not found',
        name="training-pvc",
        kind="persistentvolumeclaims",
    )
    err = raised(api_exception(404, "Not Found", body), "get pvc training-pvc")
    assert type(err) is KubeNotFoundError
    assert str(err) == "PVC training-pvc not found in namespace training"


def test_404_other_resource_path() -> None:
    msg = "the server could not find the requested resource"
    err = raised(api_exception(404, "Not Found", status(404, "NotFound", msg)), "list queues")
    assert type(err) is KubeNotFoundError
    assert str(err) == f"cannot list queues: {msg}"


def test_409_already_exists() -> None:
    body = status(
        409,
        "AlreadyExists",
        'jobs.batch.volcano.sh "tcl-r-0" already exists',
        name="tcl-r-0",
        group="batch.volcano.sh",
        kind="jobs",
    )
    err = raised(api_exception(409, "Conflict", body))
    assert isinstance(err, KubeAlreadyExistsError)
    assert str(err) == "vcjob tcl-r-0 already exists in namespace training"


def test_422_lists_each_cause() -> None:
    body = status(
        422,
        "Invalid",
        'Job.batch.volcano.sh "tcl-r-0" is invalid: ...',
        name="tcl-r-0",
        kind="Job",
        causes=[
            {
                "reason": "FieldValueInvalid",
                "message": 'Invalid value: "x": must be an integer',
                "field": "spec.tasks[0].replicas",
            },
            {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.queue"},
        ],
    )
    err = raised(api_exception(422, "Unprocessable Entity", body))
    assert type(err) is KubeApiError and err.status == 422
    assert str(err) == (
        "the API server refused to create vcjobs as invalid: spec.tasks[0].replicas: Invalid"
        ' value: "x": must be an integer; spec.queue: Required value'
    )


def test_401_is_about_credentials() -> None:
    err = raised(api_exception(401, "Unauthorized", status(401, "Unauthorized", "Unauthorized")))
    assert type(err) is KubeApiError and err.status == 401
    assert "refused your credentials (create vcjobs)" in str(err)


def test_503_is_unreachable_and_retryable() -> None:
    err = raised(api_exception(503, "Service Unavailable", "etcdserver: leader changed"))
    assert isinstance(err, KubeUnreachableError) and isinstance(err, AgentUnreachableError)


def test_other_status_keeps_the_servers_message() -> None:
    body = status(400, "BadRequest", "the body of the request was in an unknown format")
    err = raised(api_exception(400, "Bad Request", body))
    assert str(err) == (
        "cannot create vcjobs in namespace training: 400 the body of the request was in an"
        " unknown format"
    )


def test_connection_refused_names_the_server() -> None:
    from kubernetes.client import ApiClient, Configuration, CustomObjectsApi

    cfg = Configuration()
    cfg.host = "http://127.0.0.1:1"
    cfg.retries = 0
    api = CustomObjectsApi(ApiClient(cfg))
    with pytest.raises(KubeUnreachableError) as info, translated("list vcjobs", "ns"):
        api.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", "ns", "jobs")
    assert isinstance(info.value.__cause__, urllib3.exceptions.MaxRetryError)
    assert str(info.value) == (
        "the Kubernetes API server at http://127.0.0.1:1 does not answer (list vcjobs):"
        " [Errno 111] Connection refused"
    )


def test_config_exception_is_a_config_error() -> None:
    from kubernetes.config.config_exception import ConfigException

    err = raised(ConfigException("Invalid kube-config file. No configuration found."))
    assert type(err) is ConfigError
    assert "No configuration found" in str(err)


def test_other_exceptions_pass_through() -> None:
    with pytest.raises(KeyError), translated("get pods", "ns"):
        raise KeyError("x")


def test_works_as_a_decorator() -> None:
    @translated("delete vcjobs", "ns")
    def delete() -> None:
        raise api_exception(404, "Not Found", "404 page not found")

    with pytest.raises(VolcanoMissingError):
        delete()
