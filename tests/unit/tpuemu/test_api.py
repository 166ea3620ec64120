"""The emulator answers the real ``google.cloud.tpu_v2`` client as the Cloud TPU API v2 does.

No SSH here: the pool's hosts only lend addresses (no netns, no ssh_config).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest
from google.api_core import exceptions as gexc
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import tpu_v2
from google.oauth2.credentials import Credentials as OAuthCredentials

from tests.polling import wait_until
from tests.tpuemu import TpuEmulator, WorkerHost
from tests.tpuemu.client import client, wait

PARENT = "projects/proj/locations/us-central2-b"


@pytest.fixture
def emu() -> Iterator[TpuEmulator]:
    hosts = [WorkerHost(f"10.9.0.{i}", external_ip=f"34.0.0.{i}") for i in range(1, 5)]
    with TpuEmulator(hosts, create_delay_s=0.05, delete_delay_s=0.05, queue_poll_s=0.05) as e:
        yield e


@pytest.fixture
def tpu(emu: TpuEmulator) -> tpu_v2.TpuClient:
    return client(emu.url)


def _node(accel: str = "v4-16", **kw: object) -> tpu_v2.Node:
    return tpu_v2.Node(accelerator_type=accel, runtime_version="tpu-ubuntu2204-base", **kw)


def test_create_get_list_delete(emu: TpuEmulator, tpu: tpu_v2.TpuClient) -> None:
    op = tpu.create_node(
        parent=PARENT,
        node_id="n1",
        node=_node(
            scheduling_config=tpu_v2.SchedulingConfig(spot=True),
            metadata={"startup-script": "true"},
            labels={"tcl-run": "r1"},
        ),
    )
    assert op.metadata.verb == "create"
    node = wait(op)
    assert node.state == tpu_v2.Node.State.READY
    assert node.name == f"{PARENT}/nodes/n1"
    assert [
        (e.ip_address, e.port, e.access_config.external_ip) for e in node.network_endpoints
    ] == [
        ("10.9.0.1", 8470, "34.0.0.1"),
        ("10.9.0.2", 8470, "34.0.0.2"),
    ]
    assert node.scheduling_config.spot and node.labels["tcl-run"] == "r1"
    assert tpu.get_node(name=node.name).metadata["startup-script"] == "true"
    assert [n.name for n in tpu.list_nodes(parent=PARENT)] == [node.name]
    wait(tpu.delete_node(name=node.name))
    with pytest.raises(gexc.NotFound):
        tpu.get_node(name=node.name)
    assert list(tpu.list_nodes(parent=PARENT)) == []
    sent = next(r for r in emu.requests() if r["method"] == "POST")
    assert sent["query"]["nodeId"] == "n1"
    assert sent["body"]["schedulingConfig"] == {"spot": True}


def test_worker_counts(tpu: tpu_v2.TpuClient) -> None:
    # v4 names count TensorCores (v4-32: 16 chips, 4 hosts); v5litepod/v6e count chips.
    for accel, workers in [
        ("v4-8", 1),
        ("v5litepod-8", 1),
        ("v5litepod-16", 2),
        ("v6e-16", 4),
        ("v4-32", 4),
    ]:
        node = wait(tpu.create_node(parent=PARENT, node_id="w", node=_node(accel)))
        assert len(node.network_endpoints) == workers, accel
        wait(tpu.delete_node(name=node.name))


def test_errors_map_to_client_exceptions(tpu: tpu_v2.TpuClient) -> None:
    with pytest.raises(gexc.NotFound, match="was not found"):
        tpu.get_node(name=f"{PARENT}/nodes/missing")
    wait(tpu.create_node(parent=PARENT, node_id="dup", node=_node("v4-8")))
    # Over REST the client picks the class from the HTTP status: 409 is Conflict (the parent
    # of AlreadyExists), 400 is BadRequest (the parent of InvalidArgument).
    with pytest.raises(gexc.Conflict, match="already exists"):
        tpu.create_node(parent=PARENT, node_id="dup", node=_node("v4-8"))
    for accel in ("v9-8", "v4-12", "v5litepod-3", "tpu"):
        with pytest.raises(gexc.BadRequest, match="acceleratorType") as info:
            tpu.create_node(parent=PARENT, node_id="bad", node=_node(accel))
        assert info.value.code == 400
    with pytest.raises(gexc.NotFound, match="Location us-east9-z"):
        tpu.create_node(
            parent="projects/proj/locations/us-east9-z", node_id="z", node=_node("v4-8")
        )
    with pytest.raises(gexc.BadRequest, match="nodeId"):
        tpu.create_node(parent=PARENT, node_id="Bad_Name", node=_node("v4-8"))


def test_body_checked_against_the_discovery_document(emu: TpuEmulator) -> None:
    url = f"{emu.url}/v2/{PARENT}/nodes"
    cases = [
        ({"acceleratorType": "v4-8", "runtimeVersion": "x", "foo": 1}, 'Unknown name "foo"'),
        ({"acceleratorType": 8, "runtimeVersion": "x"}, "'node.accelerator_type' (TYPE_STRING)"),
        ({"acceleratorType": "v4-8", "schedulingConfig": {"spot": "yes"}}, "TYPE_BOOL"),
        ({"acceleratorType": "v4-8", "networkConfig": {"bogus": True}}, "node.network_config"),
        ({"acceleratorConfig": {"type": "V99", "topology": "2x2x1"}}, "Invalid value"),
    ]
    for body, message in cases:
        resp = httpx.post(url, params={"nodeId": "b"}, json=body)
        err = resp.json()["error"]
        assert (resp.status_code, err["code"], err["status"]) == (400, 400, "INVALID_ARGUMENT")
        assert message in err["message"], err
        assert err["details"][0]["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    unknown = "Invalid JSON payload received. Unknown name \"foo\" at 'node': Cannot find field."
    assert (
        httpx.post(url, params={"nodeId": "b"}, json=cases[0][0]).json()["error"]["message"]
        == unknown
    )


def test_enums_as_numbers_and_accelerator_config(tpu: tpu_v2.TpuClient) -> None:
    # The client sends enums as numbers (enum-encoding=int): V4 is 7 in the proto.
    cfg = tpu_v2.AcceleratorConfig(type_=tpu_v2.AcceleratorConfig.Type.V4, topology="2x2x2")
    node = wait(
        tpu.create_node(
            parent=PARENT,
            node_id="cfg",
            node=tpu_v2.Node(accelerator_config=cfg, runtime_version="x"),
        )
    )
    assert node.accelerator_type == "v4-16"
    assert node.accelerator_config.type_ == tpu_v2.AcceleratorConfig.Type.V4
    assert len(node.network_endpoints) == 2


def test_patch_metadata(tpu: tpu_v2.TpuClient) -> None:
    node = wait(tpu.create_node(parent=PARENT, node_id="p", node=_node("v4-8")))
    node.metadata["ssh-keys"] = "root:ssh-ed25519 AAAA"
    out = wait(tpu.update_node(node=node, update_mask={"paths": ["metadata"]}))
    assert out.metadata["ssh-keys"] == "root:ssh-ed25519 AAAA"
    with pytest.raises(gexc.BadRequest, match="field mask"):
        tpu.update_node(node=node, update_mask={"paths": ["accelerator_type"]})


def test_stockout_fails_the_operation(tpu: tpu_v2.TpuClient) -> None:
    wait(tpu.create_node(parent=PARENT, node_id="big", node=_node("v4-16")))
    op = tpu.create_node(parent=PARENT, node_id="more", node=_node("v4-32"))  # 4 > 2 free
    with pytest.raises(gexc.ResourceExhausted, match="no more capacity"):
        wait(op)
    with pytest.raises(gexc.NotFound):
        tpu.get_node(name=f"{PARENT}/nodes/more")
    wait(tpu.delete_node(name=f"{PARENT}/nodes/big"))
    assert (
        len(
            wait(
                tpu.create_node(parent=PARENT, node_id="more", node=_node("v4-32"))
            ).network_endpoints
        )
        == 4
    )


def _qr_state(tpu: tpu_v2.TpuClient, name: str) -> str:
    return str(tpu.get_queued_resource(name=name).state.state.name)


def test_queued_resource_starts_waiting(tpu: tpu_v2.TpuClient) -> None:
    spec = tpu_v2.QueuedResource.Tpu.NodeSpec(parent=PARENT, node_id="qw", node=_node("v4-8"))
    qr = tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[spec]))
    op = tpu.create_queued_resource(parent=PARENT, queued_resource_id="w", queued_resource=qr)
    assert wait(op).state.state == tpu_v2.QueuedResourceState.State.WAITING_FOR_RESOURCES
    _until(lambda: _qr_state(tpu, f"{PARENT}/queuedResources/w") == "ACTIVE")


def test_queued_resource_waits_for_hosts() -> None:
    hosts = [WorkerHost(f"10.9.0.{i}") for i in range(1, 5)]
    emu = TpuEmulator(hosts, create_delay_s=0.05, queue_poll_s=0.05, queued_accepted=True)
    with emu:
        _waits_for_hosts(client(emu.url))


def _waits_for_hosts(tpu: tpu_v2.TpuClient) -> None:
    wait(tpu.create_node(parent=PARENT, node_id="hog", node=_node("v4-16")))
    spec = tpu_v2.QueuedResource.Tpu.NodeSpec(parent=PARENT, node_id="qn", node=_node("v4-32"))
    qr = tpu_v2.QueuedResource(
        tpu=tpu_v2.QueuedResource.Tpu(node_spec=[spec]), spot=tpu_v2.QueuedResource.Spot()
    )
    created = wait(
        tpu.create_queued_resource(parent=PARENT, queued_resource_id="q", queued_resource=qr)
    )
    assert created.state.state == tpu_v2.QueuedResourceState.State.ACCEPTED
    name = f"{PARENT}/queuedResources/q"
    _until(lambda: _qr_state(tpu, name) == "WAITING_FOR_RESOURCES")
    wait(tpu.delete_node(name=f"{PARENT}/nodes/hog"))
    _until(lambda: _qr_state(tpu, name) == "ACTIVE")
    node = tpu.get_node(name=f"{PARENT}/nodes/qn")
    assert node.state == tpu_v2.Node.State.READY and len(node.network_endpoints) == 4
    assert node.queued_resource == name
    assert [q.name for q in tpu.list_queued_resources(parent=PARENT)] == [name]
    with pytest.raises(gexc.BadRequest, match="force"):
        tpu.delete_queued_resource(name=name)
    wait(tpu.delete_queued_resource(request={"name": name, "force": True}))
    with pytest.raises(gexc.NotFound):
        tpu.get_node(name=node.name)
    with pytest.raises(gexc.NotFound):
        tpu.get_queued_resource(name=name)


def test_require_auth() -> None:
    with TpuEmulator(require_auth=True) as emu:
        resp = httpx.get(f"{emu.url}/v2/{PARENT}/nodes")
        err = resp.json()["error"]
        assert (resp.status_code, err["status"]) == (401, "UNAUTHENTICATED")
        token = tpu_v2.TpuClient(
            transport="rest",
            credentials=OAuthCredentials(token="t"),  # type: ignore[no-untyped-call]
            client_options=ClientOptions(api_endpoint=emu.url),
        )
        assert list(token.list_nodes(parent=PARENT)) == []


def _until(cond: Callable[[], object]) -> None:
    wait_until(cond, 30, "the emulator's state")


def test_preempt_without_workers_and_queued_resource_suspends(
    emu: TpuEmulator, tpu: tpu_v2.TpuClient
) -> None:
    spec = tpu_v2.QueuedResource.Tpu.NodeSpec(parent=PARENT, node_id="s", node=_node("v4-8"))
    qr = tpu_v2.QueuedResource(tpu=tpu_v2.QueuedResource.Tpu(node_spec=[spec]))
    wait(tpu.create_queued_resource(parent=PARENT, queued_resource_id="sq", queued_resource=qr))
    name = f"{PARENT}/queuedResources/sq"
    _until(lambda: _qr_state(tpu, name) == "ACTIVE")
    out = emu.preempt("proj", "us-central2-b", "s", grace_s=1)
    assert out["node"]["state"] == "PREEMPTED" and out["shutdownExit"] == []
    node = tpu.get_node(name=f"{PARENT}/nodes/s")
    assert node.state == tpu_v2.Node.State.PREEMPTED and len(node.network_endpoints) == 1
    assert _qr_state(tpu, name) == "SUSPENDED"
    with pytest.raises(httpx.HTTPStatusError):  # only a READY node can be preempted
        emu.preempt("proj", "us-central2-b", "s")


def test_delete_while_creating_aborts_the_create(emu: TpuEmulator) -> None:
    with TpuEmulator([WorkerHost("10.9.1.1")], create_delay_s=5) as slow:
        tpu = client(slow.url)
        op = tpu.create_node(parent=PARENT, node_id="c", node=_node("v4-8"))
        assert tpu.get_node(name=f"{PARENT}/nodes/c").state == tpu_v2.Node.State.CREATING
        wait(tpu.delete_node(name=f"{PARENT}/nodes/c"))
        with pytest.raises(gexc.Aborted):
            wait(op)


def test_guest_attributes_and_request_log(emu: TpuEmulator, tpu: tpu_v2.TpuClient) -> None:
    wait(tpu.create_node(parent=PARENT, node_id="g", node=_node("v4-16")))
    emu.clear_requests()
    attrs = tpu.get_guest_attributes(request={"name": f"{PARENT}/nodes/g"})
    assert len(attrs.guest_attributes) == 2  # one per worker
    emu.node_info("g")  # admin calls are not logged
    assert [(r["method"], r["path"]) for r in emu.requests()] == [
        ("POST", f"/v2/{PARENT}/nodes/g:getGuestAttributes")
    ]


def test_discovery_client_as_skypilot_uses_it(emu: TpuEmulator) -> None:
    from googleapiclient import discovery

    api = discovery.build(
        "tpu",
        "v2",
        client_options={"api_endpoint": f"{emu.url}/"},
        credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
        static_discovery=True,
    )
    nodes = api.projects().locations().nodes()
    body = {
        "acceleratorType": "v4-8",
        "runtimeVersion": "x",
        "networkConfig": {"enableExternalIps": True},
    }
    op = nodes.create(parent=PARENT, nodeId="d", body=body).execute()
    assert op["metadata"]["@type"] == "type.googleapis.com/google.cloud.tpu.v2.OperationMetadata"
    ops = api.projects().locations().operations()
    _until(lambda: ops.get(name=op["name"]).execute()["done"])
    assert ops.get(name=op["name"]).execute()["response"]["state"] == "READY"
    assert nodes.get(name=f"{PARENT}/nodes/d").execute()["networkEndpoints"][0]["port"] == 8470
