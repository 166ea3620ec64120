"""The real Volcano Job CRD (``batch.volcano.sh/v1alpha1``) as an offline validator.

``validate_vcjob(body)`` answers what a real API server with Volcano installed would refuse,
as one message per problem, each naming the JSON path
(``spec.tasks[0].template.spec.hostNetwrok: unknown field``):

- the CRD's ``openAPIV3Schema`` (``tests/k8semu/reference/volcano/batch.volcano.sh_jobs.yaml``,
  vendored from Volcano's ``config/crd/volcano/bases``, Apache-2.0), checked with jsonschema
  Draft 7, made strict the way server-side ``fieldValidation=Strict`` is: an object schema that
  lists ``properties`` and has neither its own ``additionalProperties`` nor
  ``x-kubernetes-preserve-unknown-fields`` refuses other keys; ``x-kubernetes-int-or-string``
  becomes ``anyOf: [integer, string]``;
- ObjectMeta, which the CRD leaves open (``metadata: {type: object}``): ``name`` must be a
  DNS-1123 label of at most 63 characters (Volcano names pods ``<job>-<task>-<i>`` and a
  headless Service ``<job>``), labels and annotations map strings to strings;
- the admission webhook's cross-field rules (``pkg/webhooks/admission/jobs/validate``): policy
  actions and events that users may set, ``event`` and ``events`` not both, ``exitCode`` not
  0 and not with an event, at least one task, unique DNS-1123 task names, a task's
  ``minAvailable`` ≤ its ``replicas``, the job's ``minAvailable`` ≤ the sum of the replicas,
  no negative ``minAvailable``/``maxRetry``.

The schema is read and compiled once per process (about 0.3 s).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRD_PATH = Path(__file__).resolve().parent / "reference" / "volcano" / "batch.volcano.sh_jobs.yaml"
API_VERSION = "batch.volcano.sh/v1alpha1"
KIND = "Job"

# Volcano's bus/v1alpha1 actions.go, and the webhook's policyActionMap/policyEventMap: the
# members users may write (SyncJob, EnqueueJob, the queue actions, OutOfSync and CommandIssued
# are the controller's own and refused). RestartPod and RestartPartition are in newer trees.
USER_ACTIONS = frozenset(
    {
        "AbortJob",
        "RestartJob",
        "RestartTask",
        "RestartPod",
        "RestartPartition",
        "TerminateJob",
        "CompleteJob",
        "ResumeJob",
    }
)
INTERNAL_EVENTS = frozenset({"OutOfSync", "CommandIssued"})

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME_CHARS = 63


@functools.cache
def _validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(CRD_PATH.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def _strict(node: Any) -> Any:
    """The schema as a Strict server reads it (see the module docstring)."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if out.pop("x-kubernetes-int-or-string", False):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if (
        out.get("type") == "object"
        and "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields", False)
    ):
        out["additionalProperties"] = False
    return out


def _path(parts: Sequence[str | int]) -> str:
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text or "<root>"


def _schema_messages(body: Mapping[str, Any]) -> Iterator[str]:
    errors = sorted(_validator().iter_errors(body), key=lambda e: list(map(str, e.absolute_path)))
    for error in errors:
        where = list(error.absolute_path)
        if error.validator == "additionalProperties":
            known = error.schema.get("properties", {})
            extra = sorted(key for key in error.instance if key not in known)
            for key in extra:
                yield f"{_path([*where, key])}: unknown field"
        elif error.validator == "type":
            yield f"{_path(where)}: {error.instance!r} is not of type {error.validator_value}"
        else:
            yield f"{_path(where)}: {error.message}"


def _metadata_messages(body: Mapping[str, Any]) -> Iterator[str]:
    if body.get("apiVersion") != API_VERSION:
        yield f"apiVersion: {body.get('apiVersion')!r} is not {API_VERSION}"
    if body.get("kind") != KIND:
        yield f"kind: {body.get('kind')!r} is not {KIND}"
    meta = body.get("metadata")
    if not isinstance(meta, dict):
        yield "metadata: required object missing"
        return
    name = meta.get("name")
    if not isinstance(name, str) or not _DNS1123_LABEL.match(name) or len(name) > MAX_NAME_CHARS:
        yield (
            f"metadata.name: {name!r} is not a DNS-1123 label (lower-case alphanumerics and '-',"
            f" at most {MAX_NAME_CHARS} characters)"
        )
    for key in ("labels", "annotations"):
        mapping = meta.get(key, {})
        if not isinstance(mapping, dict):
            yield f"metadata.{key}: must be a map of strings"
            continue
        for k, v in mapping.items():
            if not isinstance(v, str):
                yield f"metadata.{key}.{k}: {v!r} is not of type 'string'"


def _policy_messages(policies: Any, where: str) -> Iterator[str]:
    if not isinstance(policies, list):
        return
    for i, policy in enumerate(policies):
        if not isinstance(policy, dict):
            continue
        at = f"{where}[{i}]"
        action = policy.get("action")
        if action is not None and action not in USER_ACTIONS:
            yield f"{at}.action: invalid policy action {action!r} (one of {sorted(USER_ACTIONS)})"
        events = [policy["event"]] if "event" in policy else []
        events += policy.get("events", []) if isinstance(policy.get("events"), list) else []
        for event in events:
            if event in INTERNAL_EVENTS:
                yield f"{at}: event {event!r} is internal to Volcano"
        if "event" in policy and policy.get("events"):
            yield f"{at}: must not specify event and events together"
        if "exitCode" in policy:
            if events:
                yield f"{at}: must not specify event and exitCode together"
            if policy["exitCode"] == 0:
                yield f"{at}.exitCode: 0 is not a valid error code"
        elif not events:
            yield f"{at}: either event or exitCode is required"


def _webhook_messages(body: Mapping[str, Any]) -> Iterator[str]:
    spec = body.get("spec")
    if not isinstance(spec, dict):
        yield "spec: required object missing"
        return
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        yield "spec.tasks: no task specified in job spec"
        tasks = []
    total_replicas: int | None = 0
    seen: set[str] = set()
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            continue
        at = f"spec.tasks[{i}]"
        name = task.get("name")
        if not isinstance(name, str) or not _DNS1123_LABEL.match(name):
            yield f"{at}.name: {name!r} is not a DNS-1123 label"
        elif name in seen:
            yield f"{at}.name: duplicated task name {name!r}"
        else:
            seen.add(name)
        replicas = task.get("replicas", 0)
        if not isinstance(replicas, int):
            total_replicas = None  # the schema's message says why; no sum to compare with
        else:
            if replicas < 0:
                yield f"{at}.replicas: {replicas} must be >= 0"
            if total_replicas is not None:
                total_replicas += replicas
            min_available = task.get("minAvailable")
            if isinstance(min_available, int):
                if min_available < 0:
                    yield f"{at}.minAvailable: {min_available} must be >= 0"
                elif min_available > replicas:
                    yield (
                        f"{at}.minAvailable: {min_available} is greater than the task's"
                        f" replicas {replicas}"
                    )
        yield from _policy_messages(task.get("policies"), f"{at}.policies")
    for key in ("minAvailable", "maxRetry"):
        value = spec.get(key)
        if isinstance(value, int) and value < 0:
            yield f"spec.{key}: {value} must be >= 0"
    min_available = spec.get("minAvailable")
    if (
        isinstance(min_available, int)
        and tasks
        and total_replicas is not None
        and min_available > total_replicas
    ):
        yield (
            f"spec.minAvailable: {min_available} is greater than the total replicas"
            f" {total_replicas}"
        )
    yield from _policy_messages(spec.get("policies"), "spec.policies")


def validate_vcjob(body: Mapping[str, Any]) -> list[str]:
    """What a Strict API server with Volcano's webhook would refuse in ``body``; [] if nothing."""
    return [*_metadata_messages(body), *_schema_messages(body), *_webhook_messages(body)]
