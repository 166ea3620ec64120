"""The Cloud TPU API v2, through Google's own client (``google-cloud-tpu``, REST transport).

The only module that calls it: Google's exceptions (``google.api_core``, ``google.auth``,
``requests``) become tcl's here, each one line naming the host and the fix. The client is
synchronous; each call runs in a thread so the event loop (other nodes' logs) keeps going.

The endpoint can be overridden (config ``api_endpoint`` or ``TCL_TPU_API_ENDPOINT``), with
anonymous credentials (``credentials: anonymous`` or ``TCL_TPU_CREDENTIALS=anonymous``), so the
same code talks to the emulator under ``tests/tpuemu``.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tcl.control.config import TpuHost
from tcl.control.errors import AgentError, AgentUnreachableError, NoCapacityError, TclError

ENDPOINT_ENV = "TCL_TPU_API_ENDPOINT"
CREDENTIALS_ENV = "TCL_TPU_CREDENTIALS"
OPERATION_TIMEOUT_S = 900.0
POLL_INTERVAL_S = 0.5

# Node states (the API's enum): what tcl does with a node in each
USABLE = frozenset({"READY"})
COMING = frozenset({"CREATING", "STARTING", "RESTARTING", "REPAIRING", "REIMAGING", "UNHIDING"})
LOST = frozenset(
    {
        "PREEMPTED",
        "TERMINATED",
        "STOPPED",
        "STOPPING",
        "UNKNOWN",
        "HIDDEN",
        "HIDING",
        "STATE_UNSPECIFIED",
    }
)
GOING = frozenset({"DELETING"})

T = TypeVar("T")


class TpuApiError(TclError):
    """The Cloud TPU API refused a request or cannot be used (credentials, permission)."""


class NodeNotReadyError(TpuApiError, AgentError):
    """A node being started went away or did not get ready (preempted meanwhile, vanished,
    too slow): not the run's fault; placing it again later may succeed."""


class TpuApiUnreachableError(AgentUnreachableError):
    """The Cloud TPU API could not be reached (network): retried like any dropped host."""


@dataclass(frozen=True)
class TpuNode:
    """What tcl reads of a node: its state and one address per worker."""

    name: str  # projects/P/locations/Z/nodes/N
    state: str
    accelerator_type: str
    runtime_version: str
    endpoints: tuple[str, ...]  # per worker: the address tcl's SSH reaches
    spot: bool = False
    preemptible: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    created_at: float | None = None  # unix seconds (None: the API did not say)

    @property
    def node_id(self) -> str:
        return self.name.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class NodeRequest:
    """The node tcl asks for (also what ``tcl submit --dry-run`` prints)."""

    node_id: str
    accelerator_type: str
    runtime_version: str
    spot: bool
    preemptible: bool
    network: str | None
    subnetwork: str | None
    service_account: str | None
    external_ips: bool
    labels: Mapping[str, str]
    metadata: Mapping[str, str]

    def body(self) -> dict[str, Any]:
        """The REST body (camelCase JSON, as the client sends it)."""
        network: dict[str, Any] = {"enableExternalIps": self.external_ips}
        if self.network:
            network["network"] = self.network
        if self.subnetwork:
            network["subnetwork"] = self.subnetwork
        body: dict[str, Any] = {
            "acceleratorType": self.accelerator_type,
            "runtimeVersion": self.runtime_version,
            "networkConfig": network,
            "schedulingConfig": {"spot": self.spot, "preemptible": self.preemptible},
            "labels": dict(self.labels),
            "metadata": dict(self.metadata),
        }
        if self.service_account:
            body["serviceAccount"] = {"email": self.service_account}
        return body


class TpuApi:
    """One host's view of the API: its project and zone."""

    def __init__(self, host: str, cfg: TpuHost) -> None:
        self.host = host
        self.cfg = cfg
        self._client: Any = None
        self._project = cfg.project

    # the client --------------------------------------------------------------------------

    def _make_client(self) -> Any:
        from google.api_core.client_options import ClientOptions
        from google.cloud import tpu_v2

        endpoint = os.environ.get(ENDPOINT_ENV) or self.cfg.api_endpoint
        options = ClientOptions(api_endpoint=endpoint) if endpoint else None
        how = os.environ.get(CREDENTIALS_ENV) or self.cfg.credentials
        if how == "anonymous":
            from google.auth.credentials import AnonymousCredentials

            creds: Any = AnonymousCredentials()  # type: ignore[no-untyped-call]
        else:
            import google.auth

            creds, adc_project = google.auth.default(
                scopes=["https://www.googleapis.com/auth/cloud-platform"]
            )
            self._project = self._project or adc_project
        return tpu_v2.TpuClient(transport="rest", credentials=creds, client_options=options)

    def _parent(self) -> str:
        if not self._project:
            raise TpuApiError(
                f"{self.host}: no Google Cloud project: set `project:` for the host in the "
                "config (or a default project for Application Default Credentials)"
            )
        return f"projects/{self._project}/locations/{self.cfg.zone}"

    def node_name(self, node_id: str) -> str:
        return f"{self._parent()}/nodes/{node_id}"

    async def _call(self, what: str, fn: Callable[[], T], missing_ok: bool = False) -> T:
        """``fn`` in a thread, its errors translated; a 404 raises :class:`_NotFound` when
        ``missing_ok`` (the caller expects one) unless it is about the zone itself."""

        def run() -> T:
            if self._client is None:
                self._client = self._make_client()
            return fn()

        try:
            return await asyncio.to_thread(_translated, self.host, what, run)
        except _NotFound as e:
            # Google words a missing zone "Location Z not found or not available." (from
            # location lookups; the TPU API's own wording for a node path is unverified)
            zone_missing = str(e).startswith("Location ")
            if missing_ok and not zone_missing:
                raise
            if zone_missing:
                raise TpuApiError(
                    f"{self.host}: zone {self.cfg.zone} is not a Cloud TPU location of project "
                    f"{self._project}: {e} (check `zone:` in the config)"
                ) from None
            raise TpuApiError(f"{self.host}: {what}: not found: {e}") from None

    # nodes -------------------------------------------------------------------------------

    async def get_node(self, node_id: str) -> TpuNode | None:
        """The node, or None when it does not exist."""
        try:
            raw = await self._call(
                "get node",
                lambda: self._client.get_node(name=self.node_name(node_id)),
                missing_ok=True,
            )
        except _NotFound:
            return None
        return self._view(raw)

    async def create_node(self, req: NodeRequest, timeout_s: float = OPERATION_TIMEOUT_S) -> None:
        """Create the node and wait for the operation (the node exists, maybe CREATING)."""
        node = _node(req)

        def create() -> None:
            op = self._client.create_node(parent=self._parent(), node_id=req.node_id, node=node)
            op.result(timeout=timeout_s)

        await self._call(f"create node {req.node_id}", create)

    async def create_queued(self, req: NodeRequest) -> None:
        """Ask for the node through a queued resource (named as the node); returns once the
        request is accepted: the node appears when capacity does."""
        from google.cloud import tpu_v2

        node = _node(req)
        qr = tpu_v2.QueuedResource(
            tpu=tpu_v2.QueuedResource.Tpu(
                node_spec=[
                    tpu_v2.QueuedResource.Tpu.NodeSpec(
                        parent=self._parent(), node_id=req.node_id, node=node
                    )
                ]
            ),
        )
        if req.spot:
            qr.spot = tpu_v2.QueuedResource.Spot()

        def create() -> None:
            op = self._client.create_queued_resource(
                parent=self._parent(), queued_resource_id=req.node_id, queued_resource=qr
            )
            op.result(timeout=OPERATION_TIMEOUT_S)

        await self._call(f"create queued resource {req.node_id}", create)

    async def queued_state(self, node_id: str) -> str | None:
        try:
            raw = await self._call(
                "get queued resource",
                lambda: self._client.get_queued_resource(
                    name=f"{self._parent()}/queuedResources/{node_id}"
                ),
                missing_ok=True,
            )
        except _NotFound:
            return None
        return str(raw.state.state.name)

    async def delete_queued(self, node_id: str) -> None:
        """Delete the queued resource named as the node (a missing one is not an error)."""
        # names are made in the call: the project may come from the credentials, read there
        await self._delete(
            f"queued resource {node_id}",
            lambda: self._client.delete_queued_resource(
                name=f"{self._parent()}/queuedResources/{node_id}"
            ),
        )

    async def delete_node(self, node_id: str) -> None:
        """Delete the node and wait until it is gone (a missing node is not an error)."""
        await self._delete(
            f"node {node_id}", lambda: self._client.delete_node(name=self.node_name(node_id))
        )

    async def _delete(self, what: str, start: Callable[[], Any]) -> None:
        """Start a delete (``start`` returns its operation) and wait for it; 404: gone."""

        def delete() -> None:
            start().result(timeout=OPERATION_TIMEOUT_S)

        try:
            await self._call(f"delete {what}", delete, missing_ok=True)
        except _NotFound:
            return

    async def wait_state(
        self,
        node_id: str,
        until: frozenset[str],
        timeout_s: float,
        on_state: Callable[[str], None] = lambda _s: None,
    ) -> TpuNode:
        """Poll until the node's state is in ``until``; a lost node or a timeout is an error."""
        deadline = time.monotonic() + timeout_s
        while True:
            node = await self.get_node(node_id)
            if node is None:
                raise NodeNotReadyError(f"{self.host}: node {node_id} vanished while starting")
            if node.state in until:
                return node
            if node.state in LOST:
                raise NodeNotReadyError(f"{self.host}: node {node_id} is {node.state}")
            on_state(node.state)
            if time.monotonic() > deadline:
                raise NodeNotReadyError(
                    f"{self.host}: node {node_id} still {node.state} after {timeout_s:.0f} s"
                )
            await asyncio.sleep(POLL_INTERVAL_S)

    def _view(self, raw: Any) -> TpuNode:
        endpoints = []
        for ep in raw.network_endpoints:
            external = ep.access_config.external_ip if ep.access_config else ""
            endpoints.append(ep.ip_address if self.cfg.internal_ip or not external else external)
        sched = raw.scheduling_config
        return TpuNode(
            name=raw.name,
            state=raw.state.name,
            accelerator_type=raw.accelerator_type,
            runtime_version=raw.runtime_version,
            endpoints=tuple(endpoints),
            spot=bool(sched and sched.spot),
            preemptible=bool(sched and sched.preemptible),
            labels=dict(raw.labels),
            created_at=raw.create_time.timestamp() if raw.create_time else None,
        )


class _NotFound(Exception):
    """A 404 (internal: callers that expect one turn it into None, others into an error)."""


def _node(req: NodeRequest) -> Any:
    """The client's ``Node`` message from the request's REST body (unknown fields refused)."""
    from google.cloud import tpu_v2

    return tpu_v2.Node.from_json(json.dumps(req.body()), ignore_unknown_fields=False)


def _translated(host: str, what: str, fn: Callable[[], T]) -> T:
    """Run ``fn``; Google's and requests' exceptions become tcl's, one line each."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    try:
        return fn()
    except gexc.NotFound as e:
        raise _NotFound(_message(e)) from None
    except auth_exc.DefaultCredentialsError:
        raise TpuApiError(
            f"{host}: no Google Cloud credentials: run `gcloud auth application-default login` "
            "(or set GOOGLE_APPLICATION_CREDENTIALS to a service account key file)"
        ) from None
    except auth_exc.GoogleAuthError as e:
        raise TpuApiError(f"{host}: Google Cloud credentials refused: {_first(e)}") from None
    except gexc.ResourceExhausted as e:
        raise NoCapacityError(f"{host}: {what}: no TPU capacity: {_message(e)}") from None
    except (gexc.Unauthenticated, gexc.PermissionDenied) as e:
        raise TpuApiError(
            f"{host}: {what}: permission denied ({_message(e)}); your account needs the TPU "
            "Admin role (roles/tpu.admin) in the project"
        ) from None
    except gexc.RetryError as e:
        raise TpuApiUnreachableError(f"{host}: {what}: the TPU API did not answer: {e}") from None
    except (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.InternalServerError) as e:
        raise TpuApiUnreachableError(f"{host}: {what}: {_message(e)}") from None
    except gexc.GoogleAPICallError as e:  # InvalidArgument, AlreadyExists, FailedPrecondition
        raise TpuApiError(f"{host}: {what}: the TPU API refused: {_message(e)}") from None
    except TimeoutError:
        raise TpuApiError(f"{host}: {what}: the operation did not finish in time") from None
    except OSError as e:  # requests' ConnectionError is an OSError
        raise TpuApiUnreachableError(
            f"{host}: {what}: cannot reach the TPU API: {_first(e)}"
        ) from None


def _message(e: Any) -> str:
    """The API's own words: the REST transport prefixes them with ``METHOD URL: ``."""
    msg = str(getattr(e, "message", None) or e)
    return re.sub(r"^(GET|POST|PATCH|PUT|DELETE) \S+: ", "", msg)


def _first(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:300]
