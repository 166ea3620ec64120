"""The pods of a vcjob as Volcano's job controller creates them, plugins applied.

Name ``<job>-<task>-<index>`` (``helpers.go`` ``PodNameFmt``); Volcano's labels and
annotations; an ownerReference to the job; the ``env`` plugin's ``VK_TASK_INDEX`` and
``VC_TASK_INDEX``; the ``svc`` plugin's ``VC_<TASK>_HOSTS``/``VC_<TASK>_NUM`` (task name
upper-cased, ``-`` → ``_``) plus ``hostname``/``subdomain``. Plugin env goes after the
container's own, as the plugins append it.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.k8semu.resources import new_meta, normalize_pod_spec


def env_name(task: str) -> str:
    return task.upper().replace("-", "_")


def pod_name(job: str, task: str, index: int) -> str:
    return f"{job}-{task}-{index}"


def job_pod(vc: dict[str, Any], task: dict[str, Any], index: int) -> dict[str, Any]:
    """The pod for replica ``index`` of ``task`` (a ``spec.tasks`` item) of vcjob ``vc``."""
    meta_vc, spec_vc, status_vc = vc["metadata"], vc["spec"], vc["status"]
    job, ns, tname = meta_vc["name"], meta_vc["namespace"], task["name"]
    name = pod_name(job, tname, index)
    queue = spec_vc.get("queue", "default")
    tmpl = copy.deepcopy(task.get("template") or {})
    meta = dict(tmpl.get("metadata") or {})
    meta["name"] = name
    common = {
        "volcano.sh/job-name": job,
        "volcano.sh/queue-name": queue,
        "volcano.sh/task-spec": tname,
        "volcano.sh/task-index": str(index),
    }
    meta["labels"] = {**(meta.get("labels") or {}), **common, "volcano.sh/job-namespace": ns}
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        **common,
        "scheduling.k8s.io/group-name": f"{job}-{meta_vc['uid']}",
        "volcano.sh/job-version": str(status_vc.get("version", 0)),
        "volcano.sh/job-retry-count": str(status_vc.get("retryCount", 0)),
    }
    meta["ownerReferences"] = [
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "name": job,
            "uid": meta_vc["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = dict(tmpl.get("spec") or {})
    spec["schedulerName"] = spec_vc.get("schedulerName", "volcano")
    plugins = spec_vc.get("plugins") or {}
    extra: list[dict[str, Any]] = []
    if "env" in plugins:
        extra += [
            {"name": "VK_TASK_INDEX", "value": str(index)},
            {"name": "VC_TASK_INDEX", "value": str(index)},
        ]
    if "svc" in plugins:
        spec["hostname"], spec["subdomain"] = name, job
        for t in spec_vc["tasks"]:
            hosts = [f"{pod_name(job, t['name'], i)}.{job}" for i in range(int(t["replicas"]))]
            extra += [
                {"name": f"VC_{env_name(t['name'])}_HOSTS", "value": ",".join(hosts)},
                {"name": f"VC_{env_name(t['name'])}_NUM", "value": str(len(hosts))},
            ]
    spec["containers"] = [
        {**c, "env": [*(c.get("env") or []), *extra]} for c in spec.get("containers") or []
    ]
    normalize_pod_spec(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": new_meta(meta, ns), "spec": spec}
