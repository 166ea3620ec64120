"""The Kubernetes core/v1 fields tcl writes, as typed data (a pod template and its parts).

Only what tcl emits is modelled. Field names are Python's; ``dump`` gives the API's camelCase
dict (``model_dump(by_alias=True, exclude_none=True)``), so a field left ``None`` is absent.
Quantities (``"32"``, ``"256Gi"``, GPU counts) are strings, as the API server returns them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class K8sModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )

    def dump(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class ObjectMeta(K8sModel):
    name: str
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class TemplateMeta(K8sModel):
    """A pod template's metadata: the controller names the pods."""

    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class ObjectFieldSelector(K8sModel):
    field_path: str  # e.g. status.podIP, metadata.name


class EnvVarSource(K8sModel):
    field_ref: ObjectFieldSelector


class EnvVar(K8sModel):
    name: str
    value: str | None = None
    value_from: EnvVarSource | None = None

    @classmethod
    def from_field(cls, name: str, field_path: str) -> EnvVar:
        return cls(
            name=name, value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path=field_path))
        )


class ResourceRequirements(K8sModel):
    limits: dict[str, str] | None = None
    requests: dict[str, str] | None = None


class ContainerPort(K8sModel):
    name: str
    container_port: int
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"


class VolumeMount(K8sModel):
    name: str
    mount_path: str
    read_only: bool | None = None


class Capabilities(K8sModel):
    add: list[str] | None = None


class SecurityContext(K8sModel):
    capabilities: Capabilities | None = None


class Container(K8sModel):
    name: str
    image: str
    command: list[str]
    args: list[str] | None = None
    env: list[EnvVar] | None = None
    ports: list[ContainerPort] | None = None
    resources: ResourceRequirements | None = None
    volume_mounts: list[VolumeMount] | None = None
    security_context: SecurityContext | None = None


class PvcSource(K8sModel):
    claim_name: str
    read_only: bool | None = None


class EmptyDirSource(K8sModel):
    medium: Literal["", "Memory"] | None = None
    size_limit: str | None = None


class SecretSource(K8sModel):
    secret_name: str
    default_mode: int | None = None  # octal file mode, e.g. 0o400


class Volume(K8sModel):
    name: str
    persistent_volume_claim: PvcSource | None = None
    empty_dir: EmptyDirSource | None = None
    secret: SecretSource | None = None


class Toleration(K8sModel):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    toleration_seconds: int | None = None


class PodSpec(K8sModel):
    containers: list[Container]
    restart_policy: Literal["Never", "OnFailure", "Always"] = "Never"
    volumes: list[Volume] | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[Toleration] | None = None
    priority_class_name: str | None = None
    service_account_name: str | None = None


class PodTemplateSpec(K8sModel):
    metadata: TemplateMeta | None = None
    spec: PodSpec


class Pod(K8sModel):
    api_version: Literal["v1"] = "v1"
    kind: Literal["Pod"] = "Pod"
    metadata: ObjectMeta
    spec: PodSpec


class Secret(K8sModel):
    api_version: Literal["v1"] = "v1"
    kind: Literal["Secret"] = "Secret"
    metadata: ObjectMeta
    type: Literal["Opaque"] = "Opaque"
    data: dict[str, str]  # key -> base64 of the bytes
