"""A Kubernetes API server + Volcano emulator for tests (``K8sEmulator`` in ``.server``).

The official ``kubernetes`` client (CoreV1Api, CustomObjectsApi, ``kubernetes.stream.stream``
and ``portforward``) talks to it over plain HTTP on 127.0.0.1 with a bearer token
(``K8sEmulator.write_kubeconfig``). Needs root: each pod gets namespaces of its own.
Fixtures: ``tests.k8semu.fixtures`` (``k8semu_factory``, ``k8semu``, ``kubeconfig``,
``k8s_client``).

Emulated, with the real paths, status codes and JSON shapes:

- discovery (``/api``, ``/api/v1``, ``/apis``, the two Volcano group versions); with
  ``volcano_installed=False`` the Volcano groups and every vcjob/queue path answer 404
  ``the server could not find the requested resource``, as for an absent CRD;
- ``jobs.batch.volcano.sh`` create (201; Volcano's mutating-webhook defaults; 422 Invalid from
  the pluggable ``validate``; 400 from the ``validatejob.volcano.sh`` webhook for an unknown
  queue; 409 AlreadyExists), get, ``/status``, list (labelSelector), delete (Status Success;
  its pods are stopped and deleted);
- pods create/get/list (labelSelector: ``=``, ``==``, ``!=``, exists, ``!``; fieldSelector
  on name, namespace, nodeName, phase, podIP, …; other labels 400)/delete (the pod
  with ``deletionTimestamp``, gone once stopped); ``pods/log`` (text/plain; ``follow``,
  ``tailLines``, ``sinceSeconds``, ``container``); ``pods/exec`` and ``pods/portforward`` over
  WebSockets (``tests.k8semu.streams``); secrets create/get/delete (``stringData`` folded into
  ``data``); PVCs get/list (Bound, from the configuration); queues get/list
  (``spec.capability``, ``status.allocated``, ``state: Open``, job counts);
- errors as ``Status`` bodies: 401, 403 (RBAC by namespace, the real message), 404, 409, 422,
  400; an unknown path is 404;
- a Volcano controller (``tests.k8semu.volcano``): gang admission against the queue's
  capability, pods ``<job>-<task>-<i>`` with Volcano's labels/annotations/ownerReferences,
  the env and svc plugins' env, hostname and subdomain; job phases and the policies
  PodEvicted/PodFailed (also by ``exitCode``)/TaskCompleted with the actions RestartJob
  (``retryCount`` counted at the restart; Failed once it reaches ``maxRetry``, default 3, so
  the pods run at most ``maxRetry`` times), AbortJob, TerminateJob, CompleteJob; with no
  matching policy the job runs on until every pod has ended (then Completed iff
  ``minSuccess``/``minAvailable``/each task's ``minAvailable`` hold, else Failed) and a
  deleted pod is made again; a pod deleted from under a running job is a PodEvicted event;
- a kubelet (``tests.k8semu.kubelet``): the container's command + args (``$(VAR)``-expanded)
  run as a local process in its own network (own IP on ``br-k8semu``, 10.214.0.0/24, an
  /etc/hosts naming every pod of its job), mount (PVC and secret volumes bind-mounted) and
  UTS (hostname = pod name) namespaces; exit code → pod phase; eviction by test hook.

Simplified or absent (say so in tests that depend on it):

- the image is ignored: commands run on the host's filesystem, ``bin_dir`` first on PATH;
  only the first container runs; no init containers, probes, ``restartPolicy`` (every pod
  is ``Never``), resource limits, securityContext, ``tty``, ``emptyDir`` (``/dev/shm`` is the
  host's), ``configMap`` volumes, ``/etc/volcano/*.host`` files, ``KUBERNETES_SERVICE_*`` env;
- a secret volume's files are plain files (no ``..data`` symlinks), written at pod start; a
  pod whose secret is missing stays ContainerCreating (no retry);
- no watch (refused with 400), patch/update, namespaces, services, PodGroup objects, events,
  pagination, ``/version``, ``/openapi``; ``resourceVersion`` is a counter; kubectl (client-go)
  does not send a bearer token over plain http, so only the Python client gets in;
- gang admission counts every pod of the job (not just ``minAvailable``) against the queue's
  own resource keys only; no node capacity, priorities, preemption or reclaim; jobs are
  admitted in creation order whenever they fit; pods of a queued job are created at once and
  kept Pending with ``PodScheduled=False/Unschedulable`` (Volcano with the enqueue action
  would create them only once the PodGroup is Inqueue);
- RestartTask, RestartPod and the other actions fail the job (reason ``UnsupportedAction``).
"""

from tests.k8semu.config import Network, QueueSpec, minimal_vcjob_check
from tests.k8semu.server import K8sEmulator

__all__ = ["K8sEmulator", "Network", "QueueSpec", "minimal_vcjob_check"]
