"""A minimal Volcano job controller and gang scheduler, ticking over ``Cluster``.

Per vcjob (``reconcile``, every ``tick_s`` under the cluster lock), after Volcano's
``pkg/controllers/job/state``:

    (created) ─► Pending ──gang admitted──► Running ──all pods ended──► Completed | Failed
                   ▲                          │ PodEvicted / PodFailed / TaskCompleted → policy
                   └─(pods gone)─ Restarting ◄┤ RestartJob: retryCount += 1
                                  │           ├ AbortJob → Aborting → Aborted
                   retryCount ≥ maxRetry      ├ TerminateJob → Terminating → Terminated
                                  ▼           └ CompleteJob → Completing → Completed
                                Failed

With no matching policy the job runs on (Volcano's ``SyncJob``): a deleted pod is made
again, and once every pod has ended the job is Completed if ``succeeded >= minAvailable``
(and each task's ``minAvailable``, ``minSuccess`` hold), else Failed. A gang is admitted
only when its queue's capability, minus what the queue's running pods hold, covers every pod
of the job; then all its pods start together. Stopping a job's pods deletes them except
Succeeded/Failed ones (``PodRetainPhaseSoft``); a restart deletes them all, except on the
last retry.
"""

from __future__ import annotations

from typing import Any

from tests.k8semu import podspec
from tests.k8semu.cluster import TERMINAL, Cluster, JobRecord, PodRecord
from tests.k8semu.queues import Queues
from tests.k8semu.resources import next_version, now

STOPPING = {"AbortJob": "Aborting", "TerminateJob": "Terminating", "CompleteJob": "Completing"}
AFTER_STOP = {"Aborting": "Aborted", "Terminating": "Terminated", "Completing": "Completed"}
Event = tuple[str, str, int | None]  # (event, task, exit code)


class Controller:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster
        self.queues = Queues(cluster)

    # --- pods of a job -----------------------------------------------------------------------

    def _task(self, job: JobRecord, name: str) -> dict[str, Any]:
        return next(t for t in job.obj["spec"]["tasks"] if t["name"] == name)

    def _create_pod(self, job: JobRecord, task: dict[str, Any], index: int) -> PodRecord:
        rec = self.c.add_pod(
            podspec.job_pod(job.obj, task, index),
            job.obj["metadata"]["name"],
            job.obj["spec"].get("queue", "default"),
        )
        job.pods[rec.name] = task["name"]
        return rec

    def _make_pods(self, job: JobRecord) -> None:
        job.pods = {}
        for task in job.obj["spec"]["tasks"]:
            for i in range(int(task["replicas"])):
                self._create_pod(job, task, i)

    def _job_pods(self, job: JobRecord) -> list[PodRecord]:
        ns = job.obj["metadata"]["namespace"]
        return [self.c.pods[(ns, p)] for p in job.pods if (ns, p) in self.c.pods]

    def _start(self, job: JobRecord, recs: list[PodRecord]) -> None:
        """Give ``recs`` their netns, rewrite every pod's /etc/hosts, start ``recs``."""
        placed = [(rec, *self.c.assign_network(rec)) for rec in recs]
        # what the svc plugin's headless Service + hostname/subdomain give each pod in DNS
        pods = [r for r in self._job_pods(job) if r.netns and r.phase not in TERMINAL]
        entries = [
            (
                str(r.obj["status"]["podIP"]),
                f"{r.name}.{r.job}.{r.namespace}.svc.cluster.local {r.name}.{r.job} {r.name}",
            )
            for r in pods
        ]
        for r in pods:
            assert r.netns is not None
            self.c.network.write_hosts(r.netns, entries)
        for rec, netns, ip in placed:
            self.c.start(rec, netns, ip)

    def _try_admit(self, job: JobRecord) -> None:
        pods = self._job_pods(job)
        spec = job.obj["spec"]
        n, min_av = len(pods), int(spec.get("minAvailable", len(pods)))
        gang = (
            f"{n}/{n} tasks in gang unschedulable: pod group is not ready, {n} Pending, "
            f"{min_av} minAvailable; Pending: {n} Unschedulable"
        )
        q = self.queues.get(spec.get("queue", "default"))
        assert q is not None  # the webhook refused the job at create
        why = next(filter(None, (self.c.missing_volume(r.obj) for r in pods)), None)
        why = why or self.queues.shortage(q, pods)
        if why:
            for rec in pods:
                self.c.set_unschedulable(rec, f"{gang}; {why}")
            return
        self._start(job, pods)
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
        keys = ("pending", "running", "succeeded", "failed", "terminating")
        counts = dict.fromkeys(keys, 0)
        tasks: dict[str, dict[str, dict[str, int]]] = {}
        for rec in self._job_pods(job):
            deleting = rec.obj["metadata"].get("deletionTimestamp")
            counts["terminating" if deleting else rec.phase.lower()] += 1
            phases = tasks.setdefault(job.pods[rec.name], {"phase": {}})["phase"]
            phases[rec.phase] = phases.get(rec.phase, 0) + 1
        before = {k: st.get(k) for k in keys}
        for k, v in counts.items():
            if v:
                st[k] = v
            else:
                st.pop(k, None)
        st["taskStatusCount"] = tasks
        if before != {k: st.get(k) for k in keys}:
            job.obj["metadata"]["resourceVersion"] = next_version()

    # --- policies ----------------------------------------------------------------------------

    def _policy(self, job: JobRecord, event: Event) -> str | None:
        """The action of the first matching policy: the task's own, then the job's."""
        name, task, code = event
        spec = job.obj["spec"]
        for pol in [*(self._task(job, task).get("policies") or []), *(spec.get("policies") or [])]:
            if "exitCode" in pol:
                if name == "PodFailed" and code == pol["exitCode"]:
                    return str(pol["action"])
                continue
            events = [pol["event"]] if pol.get("event") else list(pol.get("events") or [])
            if name in events or "*" in events:
                return str(pol["action"])
        return None

    def _events(self, job: JobRecord) -> list[Event]:
        ns = job.obj["metadata"]["namespace"]
        # a pod deleted from under a running job is an eviction to Volcano (deletePod)
        out: list[Event] = [
            ("PodEvicted", t, None) for p, t in job.pods.items() if (ns, p) not in self.c.pods
        ]
        by_task: dict[str, list[str]] = {}
        for rec in self._job_pods(job):
            task = job.pods[rec.name]
            by_task.setdefault(task, []).append(rec.phase)
            if rec.phase == "Failed":
                state = rec.obj["status"]["containerStatuses"][0]["state"]
                code = state.get("terminated", {}).get("exitCode")
                out.append(("PodEvicted" if rec.evicted else "PodFailed", task, code))
        for task, phases in by_task.items():
            whole = len(phases) == int(self._task(job, task)["replicas"])
            if whole and all(p == "Succeeded" for p in phases):
                out.append(("TaskCompleted", task, None))
        return out

    def _kill(self, job: JobRecord, *, keep_finished: bool) -> None:
        for rec in self._job_pods(job):
            if not keep_finished or rec.phase not in TERMINAL:
                self.c.stop_pod(rec, delete=True)

    def _act(self, job: JobRecord, action: str, event: str) -> None:
        st = job.obj["status"]
        if action == "RestartJob":
            before = int(st.get("retryCount", 0))
            st["retryCount"] = before + 1
            st["version"] = int(st.get("version", 0)) + 1
            # the last retry keeps the ended pods: the job turns Failed next (KillJob)
            last = before >= int(job.obj["spec"].get("maxRetry", 3)) - 1
            self._kill(job, keep_finished=last)
            self._set_phase(job, "Restarting", event, f"{event} → RestartJob")
        elif action in STOPPING:
            self._kill(job, keep_finished=True)
            self._set_phase(job, STOPPING[action], event, f"{event} → {action}")
        else:  # RestartTask, RestartPod, …: not emulated; fail the job, loudly
            self._finish(job, "Failed", "UnsupportedAction", f"k8semu does not emulate {action}")

    def _finish(self, job: JobRecord, phase: str, reason: str = "", message: str = "") -> None:
        self._kill(job, keep_finished=True)
        self._set_phase(job, phase, reason, message)
        job.done = True

    def _sync(self, job: JobRecord) -> None:
        """No policy fired: make deleted pods again; end the job once every pod has ended."""
        ns, spec = job.obj["metadata"]["namespace"], job.obj["spec"]
        missing = [(p, t) for p, t in job.pods.items() if (ns, p) not in self.c.pods]
        if missing:
            recs = [
                self._create_pod(job, self._task(job, t), int(p.rsplit("-", 1)[1]))
                for p, t in missing
            ]
            self._start(job, recs)
            return
        pods = self._job_pods(job)
        succeeded = sum(r.phase == "Succeeded" for r in pods)
        failed = sum(r.phase == "Failed" for r in pods)
        min_success = spec.get("minSuccess")
        if min_success is not None and succeeded >= int(min_success):
            self._finish(job, "Completed")
            return
        if succeeded + failed < len(job.pods):
            return
        ok = succeeded >= int(spec.get("minAvailable", len(job.pods)))
        if min_success is not None and succeeded < int(min_success):
            ok = False
        tasks = spec["tasks"]
        if int(spec.get("minAvailable", 0)) >= sum(int(t.get("minAvailable", 0)) for t in tasks):
            for t in tasks:
                done = sum(r.phase == "Succeeded" for r in pods if job.pods[r.name] == t["name"])
                if "minAvailable" in t and done < int(t["minAvailable"]):
                    ok = False
        self._finish(job, "Completed" if ok else "Failed")

    # --- the loop ----------------------------------------------------------------------------

    def reconcile(self) -> None:
        self.c.reap()
        self.c.schedule_plain()
        for job in list(self.c.jobs.values()):
            self._reconcile_job(job)
            self._count(job)

    def _reconcile_job(self, job: JobRecord) -> None:
        if job.done:
            return
        st = job.obj["status"]
        phase = st["state"]["phase"]
        if phase == "Restarting":
            if int(st.get("retryCount", 0)) >= int(job.obj["spec"].get("maxRetry", 3)):
                self._finish(job, "Failed", "", f"retried {st['retryCount']} times")
            elif not self._job_pods(job):
                job.admitted = False
                self._make_pods(job)
                self._set_phase(job, "Pending")
            return
        if phase in AFTER_STOP:
            if not any(r.stopping or r.phase == "Running" for r in self._job_pods(job)):
                self._set_phase(job, AFTER_STOP[phase])
                job.done = True
            return
        if not job.pods:
            self._make_pods(job)
        if not job.admitted:
            self._try_admit(job)
            return
        for event in self._events(job):
            action = self._policy(job, event)
            if action is not None:
                self._act(job, action, event[0])
                return
        self._sync(job)
