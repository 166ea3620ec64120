"""Volcano jobs through the real ``kubernetes`` client: plugins, gang scheduling, policies."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.stream import stream

from tests.integration.k8semu.conftest import NS, Jobs, vcjob, wait_for
from tests.k8semu import K8sEmulator, QueueSpec
from tests.k8semu.fixtures import GPU, Factory, new_client

pytestmark = pytest.mark.volcano

SHOW = (
    'echo "index=$VC_TASK_INDEX vk=$VK_TASK_INDEX"; hostname; '
    'echo "hosts=$VC_WORKER_HOSTS n=$VC_WORKER_NUM"; cat /etc/hosts'
)


def test_two_pods_get_plugin_env_hosts_and_logs(k8s_client: client.ApiClient) -> None:
    jobs = Jobs(k8s_client)
    body = vcjob("r1", SHOW + '; echo "$GREETING"')
    body["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "GREETING", "value": "ip=$(POD_IP) ns=$(MY_NS) $$(POD_IP)"},
    ]
    created = jobs.create(body)
    assert created["kind"] == "Job" and created["metadata"]["namespace"] == NS
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    job = jobs.wait_phase("r1", "Completed")
    assert job["status"]["succeeded"] == 2 and job["status"]["retryCount"] == 0
    pods = jobs.pods("r1")
    assert [p["metadata"]["name"] for p in pods] == ["r1-worker-0", "r1-worker-1"]
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
    assert all(ip.startswith("10.214.0.") for ip in ips.values()) and len(set(ips.values())) == 2
    for i, pod in enumerate(pods):
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
        assert pod["metadata"]["labels"]["volcano.sh/task-spec"] == "worker"
        assert pod["metadata"]["annotations"]["volcano.sh/task-index"] == str(i)
        log = jobs.core.read_namespaced_pod_log(pod["metadata"]["name"], NS, container="main")
        lines = log.splitlines()
        assert lines[0] == f"index={i} vk={i}"
        assert lines[1] == pod["metadata"]["name"]
        assert lines[2] == "hosts=r1-worker-0.r1,r1-worker-1.r1 n=2"
        for name, ip in ips.items():
            assert f"{ip}\t{name}.r1.{NS}.svc.cluster.local {name}.r1 {name}" in log
        assert lines[-1] == f"ip={ips[pod['metadata']['name']]} ns=$(MY_NS) $(POD_IP)"
    listed: Any = jobs.co.list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", NS, "jobs", label_selector="tcl/run=r1"
    )
    assert listed["kind"] == "JobList" and [j["metadata"]["name"] for j in listed["items"]] == [
        "r1"
    ]
    none: Any = jobs.co.list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", NS, "jobs", label_selector="tcl/run=zz"
    )
    assert none["items"] == [] and none["metadata"]["resourceVersion"]


def test_gang_waits_for_queue_room_then_starts_together(k8semu_factory: Factory) -> None:
    emu = k8semu_factory(queues=(QueueSpec("default", {GPU: 2}),))
    api = _client(emu)
    jobs = Jobs(api)
    jobs.create(vcjob("hog", "sleep 60", replicas=1, gpus=1))
    jobs.wait_phase("hog", "Running")
    jobs.create(vcjob("gang", "sleep 60", replicas=2, gpus=1))

    def pending_with_reason() -> list[dict[str, Any]] | None:
        pods = jobs.pods("gang")
        ok = len(pods) == 2 and all(p["status"].get("conditions") for p in pods)
        return pods if ok else None

    pods = wait_for(pending_with_reason, what="gang pods marked Unschedulable")
    for pod in pods:
        assert pod["status"]["phase"] == "Pending"
        cond = pod["status"]["conditions"][0]
        assert (cond["type"], cond["status"], cond["reason"]) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        )
        assert "2/2 tasks in gang unschedulable" in cond["message"]
        assert (
            "queue resource quota insufficient: nvidia.com/gpu requested 2, 1 free"
            in cond["message"]
        )
        assert emu.pod_info(NS, pod["metadata"]["name"])["pid"] is None  # nothing runs
    assert jobs.phase("gang") == "Pending"
    queue: Any = client.CustomObjectsApi(api).get_cluster_custom_object(
        "scheduling.volcano.sh", "v1beta1", "queues", "default"
    )
    assert queue["status"]["allocated"] == {GPU: "1"} and queue["status"]["state"] == "Open"
    assert queue["spec"]["capability"] == {GPU: "2"}

    jobs.delete("hog")
    jobs.wait_phase("gang", "Running")
    pods = jobs.pods("gang")
    assert [p["status"]["phase"] for p in pods] == ["Running", "Running"]
    assert all(emu.pod_info(NS, p["metadata"]["name"])["pid"] for p in pods)


def test_eviction_restarts_the_job_with_new_pods(
    k8semu: K8sEmulator, k8s_client: client.ApiClient
) -> None:
    jobs = Jobs(k8s_client)
    policy = [{"event": "PodEvicted", "action": "RestartJob"}]
    jobs.create(vcjob("r2", "sleep 60", policies=policy))
    jobs.wait_phase("r2", "Running")
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in jobs.pods("r2")}
    evicted = k8semu.evict(NS, "r2-worker-1")
    assert evicted["status"]["phase"] == "Failed" and evicted["status"]["reason"] == "Evicted"

    def restarted() -> list[dict[str, Any]] | None:
        pods = jobs.pods("r2")
        fresh = [p for p in pods if p["metadata"]["uid"] not in before.values()]
        running = [p for p in fresh if p["status"]["phase"] == "Running"]
        return fresh if len(running) == 2 and len(pods) == 2 else None

    pods = wait_for(restarted, what="new pods of r2")
    job = jobs.get("r2")
    assert job["status"]["retryCount"] == 1 and job["status"]["state"]["phase"] == "Running"
    assert [p["metadata"]["name"] for p in pods] == sorted(before)
    assert {p["metadata"]["annotations"]["volcano.sh/job-retry-count"] for p in pods} == {"1"}
    assert any(c["status"] == "Restarting" for c in job["status"]["conditions"])


def test_failed_pod_without_policy_fails_the_job_once_all_ended(
    k8s_client: client.ApiClient,
) -> None:
    # Volcano's SyncJob: no policy → the job runs on until every pod has ended
    jobs = Jobs(k8s_client)
    jobs.create(vcjob("r3", 'if [ "$VC_TASK_INDEX" = 0 ]; then exit 3; fi; sleep 1.5'))

    def failed() -> list[dict[str, Any]]:
        return [p for p in jobs.pods("r3") if p["status"]["phase"] == "Failed"]

    [pod] = wait_for(failed)
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert jobs.phase("r3") == "Running"
    job = jobs.wait_phase("r3", "Failed", "Completed")
    assert job["status"]["state"]["phase"] == "Failed"  # 1 succeeded < minAvailable 2
    assert job["status"]["retryCount"] == 0
    phases = [p["status"]["phase"] for p in jobs.pods("r3")]
    assert phases == ["Failed", "Succeeded"]  # ended pods are kept


def test_deleted_pod_without_policy_is_made_again(k8s_client: client.ApiClient) -> None:
    jobs = Jobs(k8s_client)
    jobs.create(vcjob("r5", "sleep 60"))
    jobs.wait_phase("r5", "Running")
    old = {p["metadata"]["name"]: p for p in jobs.pods("r5")}
    jobs.core.delete_namespaced_pod("r5-worker-1", NS)

    def remade() -> dict[str, Any] | None:
        pods = {p["metadata"]["name"]: p for p in jobs.pods("r5")}
        new = pods.get("r5-worker-1")
        if new is None or new["metadata"]["uid"] == old["r5-worker-1"]["metadata"]["uid"]:
            return None
        return new if new["status"]["phase"] == "Running" else None

    new = wait_for(remade, what="r5-worker-1 made again")
    assert new["status"]["podIP"] != old["r5-worker-1"]["status"]["podIP"]
    assert jobs.get("r5")["status"]["retryCount"] == 0
    # the surviving pod's /etc/hosts now names the new address
    hosts = stream(
        jobs.core.connect_get_namespaced_pod_exec,
        "r5-worker-0",
        NS,
        command=["cat", "/etc/hosts"],
        stdout=True,
        stderr=True,
        stdin=False,
        tty=False,
    )
    assert f"{new['status']['podIP']}\tr5-worker-1." in hosts


def test_delete_job_stops_and_deletes_its_pods(k8s_client: client.ApiClient) -> None:
    jobs = Jobs(k8s_client)
    jobs.create(vcjob("r4", "sleep 60"))
    jobs.wait_phase("r4", "Running")
    status = jobs.delete("r4")
    assert status["kind"] == "Status" and status["status"] == "Success"
    wait_for(lambda: jobs.pods("r4") == [], what="pods of r4 gone")


def _client(emu: K8sEmulator) -> client.ApiClient:
    return new_client(emu.write_kubeconfig(emu.config.state_dir / "kubeconfig"))


RENDEZVOUS = """
import os, socket, sys, time
hosts = os.environ["VC_WORKER_HOSTS"].split(",")
if os.environ["VC_TASK_INDEX"] == "0":
    srv = socket.create_server(("0.0.0.0", 1234))
    conn, _ = srv.accept()
    conn.sendall(("hi from " + socket.gethostname()).encode())
    conn.close()
else:
    for _ in range(100):
        try:
            with socket.create_connection((hosts[0], 1234), timeout=2) as s:
                print(s.recv(100).decode(), "via", socket.gethostbyname(hosts[0]))
                sys.exit(0)
        except OSError:
            time.sleep(0.1)
    sys.exit(1)
"""


def test_pods_reach_each_other_by_their_svc_names(k8s_client: client.ApiClient) -> None:
    # the JAX coordinator pattern: rank 1 dials VC_WORKER_HOSTS[0]:1234 over the pods' bridge
    jobs = Jobs(k8s_client)
    body = vcjob("r6", "")
    body["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"] = [
        "python",
        "-c",
        RENDEZVOUS,
    ]
    jobs.create(body)
    jobs.wait_phase("r6", "Completed")
    ip0 = jobs.pod("r6-worker-0")["status"]["podIP"]
    log = jobs.core.read_namespaced_pod_log("r6-worker-1", NS)
    assert log == f"hi from r6-worker-0 via {ip0}\n"
