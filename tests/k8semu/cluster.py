"""The cluster's state (pods, secrets, PVCs, queues, vcjobs) and the pods' life on the node.

One ``Cluster`` holds every object under one lock. Pods are records around their served
object: ``schedule_and_start`` gives a pod its netns and process, ``stop_pod`` stops it in the
background (SIGTERM, grace, SIGKILL), ``reap`` turns finished processes into pod phases. The
Volcano controller (``tests.k8semu.volcano``) drives them; the HTTP layer reads and writes
the served objects.
"""

from __future__ import annotations

import copy
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.k8semu import kubelet
from tests.k8semu.config import EmulatorConfig
from tests.k8semu.kubelet import PodProcess
from tests.k8semu.network import PodNetwork
from tests.k8semu.resources import next_version, now

TERMINAL = ("Succeeded", "Failed")


@dataclass
class PodRecord:
    obj: dict[str, Any]
    job: str | None = None  # the owning vcjob's name
    queue: str | None = None  # its queue (pods hold their share until they end)
    proc: PodProcess | None = None
    netns: str | None = None  # set when scheduled
    scheduled: bool = False
    stopping: bool = False
    delete_after_stop: bool = False
    evicted: bool = False
    gone: threading.Event = field(default_factory=threading.Event)

    @property
    def phase(self) -> str:
        return str(self.obj["status"]["phase"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"]["namespace"])


@dataclass
class JobRecord:
    obj: dict[str, Any]
    pods: dict[str, str] = field(default_factory=dict)  # this generation: pod name -> task
    admitted: bool = False
    done: bool = False


def _touch(obj: dict[str, Any]) -> None:
    obj["metadata"]["resourceVersion"] = next_version()


class Cluster:
    def __init__(self, config: EmulatorConfig, network: PodNetwork) -> None:
        self.config = config
        self.network = network
        self.lock = threading.RLock()
        self.pods: dict[tuple[str, str], PodRecord] = {}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.jobs: dict[tuple[str, str], JobRecord] = {}
        self.made_dirs: list[Path] = []
        self.pod_dir = config.state_dir / "pods"

    # --- volumes -----------------------------------------------------------------------------

    def missing_volume(self, pod: dict[str, Any]) -> str | None:
        """The scheduler's message for a pod whose PVC does not exist, else None."""
        ns = pod["metadata"]["namespace"]
        for vol in pod["spec"].get("volumes") or []:
            claim = (vol.get("persistentVolumeClaim") or {}).get("claimName")
            if claim and (ns, claim) not in self.config.pvcs:
                return f'persistentvolumeclaim "{claim}" not found'
        return None

    def _mounts(self, rec: PodRecord) -> list[tuple[Path, str]] | str:
        """``(host dir, mountPath)`` per volume mount, or the kubelet's message if one fails."""
        pod = rec.obj
        ns, uid = rec.namespace, pod["metadata"]["uid"]
        sources: dict[str, Path] = {}
        for vol in pod["spec"].get("volumes") or []:
            name = vol["name"]
            if "persistentVolumeClaim" in vol:
                sources[name] = self.config.pvcs[(ns, vol["persistentVolumeClaim"]["claimName"])]
            elif "secret" in vol:
                sname = vol["secret"]["secretName"]
                secret = self.secrets.get((ns, sname))
                if secret is None:
                    return (
                        f'MountVolume.SetUp failed for volume "{name}" : secret "{sname}" not found'
                    )
                d = self.pod_dir / uid / "secrets" / name
                d.mkdir(parents=True, exist_ok=True)
                mode = int(vol["secret"].get("defaultMode", 0o644))
                for key, value in _secret_data(secret).items():
                    f = d / key
                    f.write_bytes(value)
                    f.chmod(mode)
                sources[name] = d
            # emptyDir (and anything else) is not mounted: the host's folder is used as is.
        mounts: list[tuple[Path, str]] = []
        for c in pod["spec"]["containers"][:1]:
            for m in c.get("volumeMounts") or []:
                if m["name"] in sources:
                    mounts.append((sources[m["name"]], m["mountPath"]))
        return mounts

    # --- pod lifecycle -----------------------------------------------------------------------

    def add_pod(
        self, pod: dict[str, Any], job: str | None = None, queue: str | None = None
    ) -> PodRecord:
        pod.setdefault("status", {})
        pod["status"].update({"phase": "Pending", "qosClass": "BestEffort"})
        rec = PodRecord(pod, job, queue)
        self.pods[(rec.namespace, rec.name)] = rec
        return rec

    def set_unschedulable(self, rec: PodRecord, message: str) -> None:
        cond = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": now(),
        }
        old = rec.obj["status"].get("conditions") or []
        if old and old[0].get("message") == message:
            return
        rec.obj["status"]["conditions"] = [cond]
        _touch(rec.obj)

    def assign_network(self, rec: PodRecord) -> tuple[str, str]:
        netns, ip = self.network.add()
        rec.obj["status"]["podIP"] = ip
        rec.obj["status"]["podIPs"] = [{"ip": ip}]
        rec.obj["status"]["hostIP"] = self.network.gateway
        rec.obj["spec"]["nodeName"] = "k8semu-node"
        rec.scheduled = True
        rec.netns = netns
        return netns, ip

    def start(self, rec: PodRecord, netns: str, ip: str) -> None:
        """Run the pod's container (its netns and /etc/hosts already made)."""
        mounts = self._mounts(rec)
        st = rec.obj["status"]
        started = now()
        st["startTime"] = started
        st["conditions"] = [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        cname = rec.obj["spec"]["containers"][0]["name"]
        image = rec.obj["spec"]["containers"][0].get("image", "")
        base = {"name": cname, "image": image, "imageID": f"k8semu://{image}"}
        if isinstance(mounts, str):
            st["containerStatuses"] = [
                {
                    **base,
                    "ready": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": "ContainerCreating"}},
                }
            ]
            st["message"] = mounts
            _touch(rec.obj)
            return
        secrets = {n: _secret_text(s) for (ns, n), s in self.secrets.items() if ns == rec.namespace}
        log = self.pod_dir / rec.obj["metadata"]["uid"] / "log"
        try:
            rec.proc = kubelet.start(
                rec.obj, netns, ip, mounts, secrets, self.config.bin_dir, log, self.made_dirs
            )
        except (ValueError, OSError) as err:
            st["phase"] = "Failed"
            st["containerStatuses"] = [
                {
                    **base,
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {"exitCode": 128, "reason": "StartError", "message": str(err)}
                    },
                }
            ]
            _touch(rec.obj)
            return
        rec.proc.netns = netns
        st["phase"] = "Running"
        st["containerStatuses"] = [
            {
                **base,
                "ready": True,
                "started": True,
                "restartCount": 0,
                "containerID": f"k8semu://{rec.proc.pid}",
                "state": {"running": {"startedAt": started}},
            }
        ]
        _touch(rec.obj)

    def _terminate(self, rec: PodRecord, code: int, reason: str | None = None) -> None:
        st = rec.obj["status"]
        started = (st.get("containerStatuses") or [{}])[0].get("state", {}).get("running", {})
        term = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": started.get("startedAt", st.get("startTime")),
            "finishedAt": now(),
        }
        st["phase"] = "Succeeded" if code == 0 and reason is None else "Failed"
        if reason == "Evicted":
            st["reason"] = "Evicted"
            st["message"] = "The node was low on resource: memory. "
        for c in st.get("containerStatuses") or []:
            c.update({"ready": False, "started": False, "state": {"terminated": term}})
        for cond in st.get("conditions") or []:
            if cond["type"] in ("Ready", "ContainersReady"):
                cond.update(
                    {"status": "False", "reason": "PodCompleted" if code == 0 else "PodFailed"}
                )
        _touch(rec.obj)

    def reap(self) -> None:
        """Turn exited containers into Succeeded/Failed pods (stopping ones are left to stop)."""
        for rec in list(self.pods.values()):
            if rec.proc is not None and not rec.stopping and rec.phase == "Running":
                code = rec.proc.exit_code()
                if code is not None:
                    # the container is gone with its main process (as its pid namespace would)
                    rec.proc.kill_leftovers()
                    rec.proc.output_done(1.0)
                    self._terminate(rec, code)
                    self.network.remove(rec.proc.netns)

    def stop_pod(self, rec: PodRecord, *, delete: bool, evict: bool = False) -> None:
        """Stop in the background (SIGTERM, grace, SIGKILL); then delete or mark the phase."""
        if delete and not rec.obj["metadata"].get("deletionTimestamp"):
            rec.obj["metadata"]["deletionTimestamp"] = now()
            rec.obj["metadata"]["deletionGracePeriodSeconds"] = int(self.config.grace_s)
            _touch(rec.obj)
        rec.delete_after_stop = rec.delete_after_stop or delete
        if rec.stopping:
            return
        rec.stopping = True
        rec.evicted = rec.evicted or evict
        threading.Thread(target=self._stop, args=(rec,), daemon=True).start()

    def _stop(self, rec: PodRecord) -> None:
        code = None
        if rec.proc is not None and rec.phase == "Running":
            code = rec.proc.stop(self.config.grace_s)
        with self.lock:
            if code is not None:
                self._terminate(rec, code, "Evicted" if rec.evicted else None)
            if rec.proc is not None:
                self.network.remove(rec.proc.netns)
            if rec.delete_after_stop:
                self.pods.pop((rec.namespace, rec.name), None)
                shutil.rmtree(self.pod_dir / rec.obj["metadata"]["uid"], ignore_errors=True)
            rec.stopping = False
            rec.gone.set()

    def schedule_plain(self) -> None:
        """The default scheduler, for pods no vcjob owns (helper pods): start them alone."""
        for rec in list(self.pods.values()):
            if rec.job is not None or rec.scheduled or rec.stopping or rec.phase != "Pending":
                continue
            missing = self.missing_volume(rec.obj)
            if missing:
                self.set_unschedulable(
                    rec,
                    f"0/1 nodes are available: {missing}. preemption: 0/1 nodes are available: "
                    "1 Preemption is not helpful for scheduling.",
                )
                continue
            netns, ip = self.assign_network(rec)
            self.network.write_hosts(netns, [(ip, rec.name)])
            self.start(rec, netns, ip)

    def shutdown(self) -> None:
        with self.lock:
            recs = list(self.pods.values())
            for rec in recs:
                self.stop_pod(rec, delete=True)
        for rec in recs:
            rec.gone.wait(timeout=self.config.grace_s + 15)
        for d in reversed(self.made_dirs):
            shutil.rmtree(d, ignore_errors=True) if _empty_tree(d) else None

    def served(self, obj: dict[str, Any]) -> dict[str, Any]:
        return copy.deepcopy(obj)


def _empty_tree(d: Path) -> bool:
    """Only folders, no files: safe to remove a mount point the emulator made."""
    return d.is_dir() and all(p.is_dir() for p in d.rglob("*"))


def _secret_data(secret: dict[str, Any]) -> dict[str, bytes]:
    import base64

    out = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
    out.update({k: str(v).encode() for k, v in (secret.get("stringData") or {}).items()})
    return out


def _secret_text(secret: dict[str, Any]) -> dict[str, str]:
    return {k: v.decode(errors="replace") for k, v in _secret_data(secret).items()}
