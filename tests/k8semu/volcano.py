"""A minimal Volcano job controller and gang scheduler, ticking over ``Cluster``.

Per vcjob (``reconcile``, called every ``tick_s`` under the cluster lock):

    (created) ─► Pending ──gang admitted──► Running ──all pods Succeeded──► Completed
                   ▲                          │ PodEvicted / PodFailed / TaskCompleted → policy
                   └──── Restarting ◄─────────┤ RestartJob (retryCount < maxRetry; else Failed)
                                              ├ AbortJob → Aborting → Aborted
                                              ├ TerminateJob → Terminating → Terminated
                                              ├ CompleteJob → Completing → Completed
                                              └ no policy for a failed pod → Failed

Pods are created at once (``<job>-<task>-<i>``, helpers.go), with what the env and svc
plugins add to the pod spec. A gang is admitted only when its queue's capability, minus
what the queue's running pods hold, covers every pod of the job; then all its pods start
together. Pods stopped by the controller are deleted unless Succeeded or Failed (Volcano's
``PodRetainPhaseSoft``); a restart deletes them all.
"""

from __future__ import annotations

import re
from typing import Any

from tests.k8semu.cluster import TERMINAL, Cluster, JobRecord, PodRecord
from tests.k8semu.config import QueueSpec
from tests.k8semu.resources import new_meta, next_version, normalize_pod_spec, now

FINISHED = ("Completed", "Failed", "Aborted", "Terminated")
STOPPING = {"AbortJob": "Aborting", "TerminateJob": "Terminating", "CompleteJob": "Completing"}
AFTER_STOP = {"Aborting": "Aborted", "Terminating": "Terminated", "Completing": "Completed"}


def quantity(value: Any) -> float:
    """A resource quantity (``8``, ``"500m"``, ``"4Gi"``) as a number."""
    text = str(value)
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", text)
    if not m:
        return 0.0
    num, unit = float(m.group(1)), m.group(2)
    scale = {
        "": 1,
        "m": 1e-3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
    }
    return num * scale.get(unit, 1)


def pod_demand(pod: dict[str, Any], keys: list[str]) -> dict[str, float]:
    """What a pod asks of the queue's resource keys: requests, else limits, summed."""
    out = dict.fromkeys(keys, 0.0)
    for c in pod["spec"]["containers"]:
        res = c.get("resources") or {}
        for k in keys:
            v = (res.get("requests") or {}).get(k, (res.get("limits") or {}).get(k))
            if v is not None:
                out[k] += quantity(v)
    return out


def env_name(task: str) -> str:
    return task.upper().replace("-", "_")


class Controller:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

    # --- queues ------------------------------------------------------------------------------

    def queue(self, name: str) -> QueueSpec | None:
        return next((q for q in self.c.config.queues if q.name == name), None)

    def allocated(self, q: QueueSpec) -> dict[str, float]:
        """What the queue's scheduled, unfinished pods hold (a deleted job's until they end)."""
        keys = list(q.capability)
        total = dict.fromkeys(keys, 0.0)
        for rec in self.c.pods.values():
            if rec.queue == q.name and rec.scheduled and rec.phase not in TERMINAL:
                for k, v in pod_demand(rec.obj, keys).items():
                    total[k] += v
        return total

    def queue_counts(self, q: QueueSpec) -> dict[str, int]:
        counts = {"running": 0, "pending": 0, "completed": 0, "inqueue": 0}
        for job in self.c.jobs.values():
            if job.obj["spec"].get("queue", "default") != q.name:
                continue
            phase = job.obj["status"]["state"]["phase"]
            if phase == "Running":
                counts["running"] += 1
            elif phase in FINISHED:
                counts["completed"] += 1
            else:
                counts["pending"] += 1
        return counts

    # --- pods of a job -----------------------------------------------------------------------

    def _make_pods(self, job: JobRecord) -> None:
        vc = job.obj
        ns, name = vc["metadata"]["namespace"], vc["metadata"]["name"]
        tasks = vc["spec"]["tasks"]
        hosts = {
            t["name"]: [f"{name}-{t['name']}-{i}.{name}" for i in range(int(t.get("replicas", 1)))]
            for t in tasks
        }
        plugins = vc["spec"].get("plugins") or {}
        job.pods = {}
        queue = vc["spec"].get("queue", "default")
        for t in tasks:
            for i in range(int(t.get("replicas", 1))):
                tmpl = t.get("template") or {}
                pod_name = f"{name}-{t['name']}-{i}"
                meta = dict(tmpl.get("metadata") or {})
                meta["name"] = pod_name
                meta["labels"] = {
                    **(meta.get("labels") or {}),
                    "volcano.sh/job-name": name,
                    "volcano.sh/job-namespace": ns,
                    "volcano.sh/queue-name": vc["spec"].get("queue", "default"),
                    "volcano.sh/task-spec": t["name"],
                    "volcano.sh/task-index": str(i),
                }
                meta["annotations"] = {
                    **(meta.get("annotations") or {}),
                    "scheduling.k8s.io/group-name": f"{name}-{vc['metadata']['uid']}",
                    "volcano.sh/job-name": name,
                    "volcano.sh/job-version": str(vc["status"].get("version", 0)),
                    "volcano.sh/job-retry-count": str(vc["status"].get("retryCount", 0)),
                    "volcano.sh/queue-name": vc["spec"].get("queue", "default"),
                    "volcano.sh/task-spec": t["name"],
                    "volcano.sh/task-index": str(i),
                }
                meta["ownerReferences"] = [
                    {
                        "apiVersion": "batch.volcano.sh/v1alpha1",
                        "kind": "Job",
                        "name": name,
                        "uid": vc["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ]
                spec = dict(tmpl.get("spec") or {})
                spec["schedulerName"] = vc["spec"].get("schedulerName", "volcano")
                containers = [dict(c) for c in spec.get("containers") or []]
                extra: list[dict[str, Any]] = []
                if "env" in plugins:
                    extra += [
                        {"name": "VK_TASK_INDEX", "value": str(i)},
                        {"name": "VC_TASK_INDEX", "value": str(i)},
                    ]
                if "svc" in plugins:
                    spec["hostname"], spec["subdomain"] = pod_name, name
                    for tn, hs in hosts.items():
                        extra += [
                            {"name": f"VC_{env_name(tn)}_HOSTS", "value": ",".join(hs)},
                            {"name": f"VC_{env_name(tn)}_NUM", "value": str(len(hs))},
                        ]
                for c in containers:
                    c["env"] = [*(c.get("env") or []), *extra]
                spec["containers"] = containers
                normalize_pod_spec(spec)
                pod = {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": new_meta(meta, ns),
                    "spec": spec,
                }
                self.c.add_pod(pod, name, queue)
                job.pods[pod_name] = t["name"]

    def _job_pods(self, job: JobRecord) -> list[PodRecord]:
        ns = job.obj["metadata"]["namespace"]
        return [self.c.pods[(ns, p)] for p in job.pods if (ns, p) in self.c.pods]

    def _task_of(self, rec: PodRecord) -> str:
        return str(rec.obj["metadata"]["labels"]["volcano.sh/task-spec"])

    # --- admission ---------------------------------------------------------------------------

    def _try_admit(self, job: JobRecord) -> None:
        pods = self._job_pods(job)
        vc = job.obj
        n, min_av = len(pods), int(vc["spec"].get("minAvailable", len(pods)))
        gang = (
            f"{n}/{n} tasks in gang unschedulable: pod group is not ready, {n} Pending, "
            f"{min_av} minAvailable; Pending: {n} Unschedulable"
        )
        for rec in pods:
            missing = self.c.missing_volume(rec.obj)
            if missing:
                for r in pods:
                    self.c.set_unschedulable(r, f"{gang}; {missing}")
                return
        q = self.queue(vc["spec"].get("queue", "default"))
        assert q is not None  # refused at create
        keys = list(q.capability)
        held = self.allocated(q)
        need = dict.fromkeys(keys, 0.0)
        for rec in pods:
            for k, v in pod_demand(rec.obj, keys).items():
                need[k] += v
        short = [k for k in keys if held[k] + need[k] > quantity(q.capability[k])]
        if short:
            msg = f"{gang}; queue resource quota insufficient: " + ", ".join(
                f"{k} requested {need[k]:g}, {quantity(q.capability[k]) - held[k]:g} free "
                f"of {quantity(q.capability[k]):g}"
                for k in short
            )
            for rec in pods:
                self.c.set_unschedulable(rec, msg)
            return
        placed = [(rec, *self.c.assign_network(rec)) for rec in pods]
        # what the svc plugin's headless Service + hostname/subdomain give each pod in DNS
        entries = [
            (ip, f"{r.name}.{r.job}.{r.namespace}.svc.cluster.local {r.name}.{r.job} {r.name}")
            for r, _, ip in placed
        ]
        for _, netns, _ in placed:
            self.c.network.write_hosts(netns, entries)
        for rec, netns, ip in placed:
            self.c.start(rec, netns, ip)
        job.admitted = True
        self._set_phase(job, "Running")

    # --- status ------------------------------------------------------------------------------

    def _set_phase(self, job: JobRecord, phase: str, reason: str = "", message: str = "") -> None:
        st = job.obj["status"]
        if st["state"].get("phase") == phase:
            return
        t = now()
        st["state"] = {"phase": phase, "lastTransitionTime": t}
        if reason:
            st["state"]["reason"] = reason
        if message:
            st["state"]["message"] = message
        st.setdefault("conditions", []).append({"status": phase, "lastTransitionTime": t})
        job.obj["metadata"]["resourceVersion"] = next_version()

    def _count(self, job: JobRecord) -> None:
        st = job.obj["status"]
        counts = dict.fromkeys(("pending", "running", "succeeded", "failed", "terminating"), 0)
        tasks: dict[str, dict[str, dict[str, int]]] = {}
        for rec in self._job_pods(job):
            key = (
                "terminating" if rec.obj["metadata"].get("deletionTimestamp") else rec.phase.lower()
            )
            counts[key] = counts.get(key, 0) + 1
            phases = tasks.setdefault(self._task_of(rec), {"phase": {}})["phase"]
            phases[rec.phase] = phases.get(rec.phase, 0) + 1
        before = {k: st.get(k) for k in counts}
        for k, v in counts.items():
            if v:
                st[k] = v
            else:
                st.pop(k, None)
        st["taskStatusCount"] = tasks
        if before != {k: st.get(k) for k in counts}:
            job.obj["metadata"]["resourceVersion"] = next_version()

    # --- policies ----------------------------------------------------------------------------

    def _policy(self, job: JobRecord, event: str, task: str, code: int | None) -> str | None:
        spec = job.obj["spec"]
        task_spec: dict[str, Any] = next((t for t in spec["tasks"] if t["name"] == task), {})
        for pol in [*(task_spec.get("policies") or []), *(spec.get("policies") or [])]:
            events = [pol["event"]] if pol.get("event") else list(pol.get("events") or [])
            if "exitCode" in pol:
                if event == "PodFailed" and code == pol["exitCode"]:
                    return str(pol["action"])
                continue
            if event in events or "*" in events:
                return str(pol["action"])
        return None

    def _events(self, job: JobRecord) -> list[tuple[str, str, int | None]]:
        out: list[tuple[str, str, int | None]] = []
        pods = self._job_pods(job)
        ns = job.obj["metadata"]["namespace"]
        # a pod deleted from under a running job is an eviction to Volcano
        out += [("PodEvicted", t, None) for p, t in job.pods.items() if (ns, p) not in self.c.pods]
        for rec in pods:
            if rec.phase == "Failed":
                term = rec.obj["status"]["containerStatuses"][0]["state"].get("terminated", {})
                ev = "PodEvicted" if rec.evicted else "PodFailed"
                out.append((ev, self._task_of(rec), term.get("exitCode")))
        by_task: dict[str, list[str]] = {}
        for rec in pods:
            by_task.setdefault(self._task_of(rec), []).append(rec.phase)
        for task, phases in by_task.items():
            if all(p == "Succeeded" for p in phases):
                out.append(("TaskCompleted", task, None))
        return out

    def _kill(self, job: JobRecord, *, restart: bool) -> None:
        for rec in self._job_pods(job):
            if restart or rec.phase not in TERMINAL:
                self.c.stop_pod(rec, delete=True)

    def _act(self, job: JobRecord, action: str, event: str) -> None:
        st = job.obj["status"]
        if action == "RestartJob":
            max_retry = int(job.obj["spec"].get("maxRetry", 3))
            if int(st.get("retryCount", 0)) >= max_retry:
                self._kill(job, restart=False)
                self._set_phase(job, "Failed", "", f"retried {max_retry} times")
                job.done = True
                return
            st["retryCount"] = int(st.get("retryCount", 0)) + 1
            st["version"] = int(st.get("version", 0)) + 1
            self._kill(job, restart=True)
            self._set_phase(job, "Restarting", event, f"{event} → RestartJob")
            return
        if action in STOPPING:
            self._kill(job, restart=False)
            self._set_phase(job, STOPPING[action], event, f"{event} → {action}")
            return
        # unsupported actions (RestartTask, RestartPod, …) fail the job, loudly
        self._kill(job, restart=False)
        self._set_phase(job, "Failed", "UnsupportedAction", f"k8semu does not emulate {action}")
        job.done = True

    # --- the loop ----------------------------------------------------------------------------

    def reconcile(self) -> None:
        self.c.reap()
        self.c.schedule_plain()
        for job in list(self.c.jobs.values()):
            self._reconcile_job(job)
            self._count(job)

    def _reconcile_job(self, job: JobRecord) -> None:
        phase = job.obj["status"]["state"]["phase"]
        if job.done:
            return
        if phase == "Restarting":
            if not self._job_pods(job):
                job.admitted = False
                self._make_pods(job)
                self._set_phase(job, "Pending")
            return
        if phase in AFTER_STOP:
            pods = self._job_pods(job)
            if not any(r.stopping or r.phase == "Running" for r in pods):
                self._set_phase(job, AFTER_STOP[phase])
                job.done = True
            return
        if not job.pods:
            self._make_pods(job)
        if not job.admitted:
            self._try_admit(job)
            return
        for event, task, code in self._events(job):
            action = self._policy(job, event, task, code)
            if action is not None:
                self._act(job, action, event)
                return
            if event in ("PodFailed", "PodEvicted"):
                self._kill(job, restart=False)
                self._set_phase(job, "Failed", event, f"pod of task {task} failed")
                job.done = True
                return
        pods = self._job_pods(job)
        if pods and all(r.phase == "Succeeded" for r in pods):
            self._set_phase(job, "Completed")
            job.done = True
