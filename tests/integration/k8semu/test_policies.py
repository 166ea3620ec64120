"""Job policies beyond eviction, and pod logs as the client streams them."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.integration.k8semu.conftest import NS, Jobs, vcjob, wait_for

pytestmark = pytest.mark.volcano


def test_restart_job_gives_up_after_max_retry(k8s_client: client.ApiClient) -> None:
    jobs = Jobs(k8s_client)
    body = vcjob(
        "p1", "exit 1", replicas=1, policies=[{"event": "PodFailed", "action": "RestartJob"}]
    )
    body["spec"]["maxRetry"] = 2
    jobs.create(body)
    job = jobs.wait_phase("p1", "Failed")
    # Volcano counts the retry when it restarts, and fails the job once retryCount reaches
    # maxRetry: with maxRetry 2, the pods ran twice
    assert job["status"]["retryCount"] == 2
    phases = [c["status"] for c in job["status"]["conditions"]]
    assert phases.count("Restarting") == 2 and phases.count("Running") == 2
    assert phases[-1] == "Failed"
    [pod] = jobs.pods("p1")  # the last retry keeps the failed pod
    assert pod["metadata"]["annotations"]["volcano.sh/job-retry-count"] == "1"
    assert pod["status"]["phase"] == "Failed"


def test_task_completed_completes_the_job(k8s_client: client.ApiClient) -> None:
    jobs = Jobs(k8s_client)
    body = vcjob("p2", "sleep 60", replicas=1)
    leader: dict[str, Any] = {
        "name": "leader",
        "replicas": 1,
        "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
        "template": {
            "spec": {
                "containers": [{"name": "main", "image": "x", "command": ["sh", "-c", "sleep 0.3"]}]
            }
        },
    }
    body["spec"]["tasks"].insert(0, leader)
    body["spec"]["minAvailable"] = 2
    jobs.create(body)
    job = jobs.wait_phase("p2", "Completed")
    assert any(c["status"] == "Completing" for c in job["status"]["conditions"])
    # the worker still running was stopped and deleted; the leader's Succeeded pod stays
    wait_for(lambda: [p["metadata"]["name"] for p in jobs.pods("p2")] == ["p2-leader-0"])


def test_logs_follow_and_since_seconds(k8s_client: client.ApiClient) -> None:
    jobs = Jobs(k8s_client)
    jobs.create(vcjob("p3", "echo early; sleep 1.5; echo late; printf tail", replicas=1))
    jobs.wait_phase("p3", "Running")
    # without preloading, the client hands back the raw urllib3 response (typed as str)
    resp: Any = jobs.core.read_namespaced_pod_log(
        "p3-worker-0", NS, follow=True, _preload_content=False
    )
    assert resp.headers["content-type"].startswith("text/plain")
    streamed = b"".join(resp.stream(64))
    assert streamed == b"early\nlate\ntail"  # followed until the container ended
    assert jobs.pod("p3-worker-0")["status"]["phase"] == "Succeeded"
    recent = jobs.core.read_namespaced_pod_log("p3-worker-0", NS, since_seconds=1)
    assert recent == "late\ntail"
    assert jobs.core.read_namespaced_pod_log("p3-worker-0", NS, tail_lines=2) == "late\ntail"
