"""A Cloud TPU API v2 emulator for tests (``TpuEmulator`` in ``tests.tpuemu.server``).

Emulated, faithfully enough for ``google.cloud.tpu_v2.TpuClient`` (REST) and gcloud:

- ``projects.locations.nodes`` create/get/list/patch/delete and ``:getGuestAttributes`` (empty
  attributes), ``operations`` get/list (LROs whose ``response``/``metadata`` carry ``@type``),
  ``queuedResources`` create/get/list/delete (``force``);
- request bodies checked against the discovery document ``tpu.v2.json``; errors as Google
  sends them (``{"error": {code, message, status, details}}``; over REST the client picks the
  exception from the HTTP status: ``NotFound``, ``Conflict`` (409, parent of AlreadyExists),
  ``BadRequest`` (400, parent of InvalidArgument), ``Unauthorized``; a failed operation's
  ``google.rpc`` code gives ``ResourceExhausted``, ``Aborted``); enums accepted as numbers or
  names, answered as names;
- accelerator types and their worker counts (v2/v3/v4/v5p name TensorCores, v5litepod/v6e
  chips; 4 chips per host); capacity from a pool of real sshd hosts (netns): stockout is a
  failed operation with RESOURCE_EXHAUSTED, a queued resource waits (WAITING_FOR_RESOURCES,
  its first state, as Google's guide now says; ``queued_accepted=True`` gives ACCEPTED first);
- a VM's life on its hosts: ``metadata["startup-script"]`` runs as root at each (re)creation,
  in the background; preemption (``POST /emulator/nodes/P/Z/ID:preempt``) runs
  ``metadata["shutdown-script"]`` with a grace period, then kills; delete kills. Killing means
  SIGKILL to every process in the host's network namespace except its sshd daemon.

Test-only routes (not logged, never authenticated): ``POST /emulator/nodes/P/Z/ID:preempt``
(body ``{"grace_s": 10}``), ``GET|DELETE /emulator/requests``, ``GET /emulator/nodes/ID``
(workers, startup exit codes, log paths), ``GET /emulator/nodes/ID/startup-log?worker=N``.
``TpuEmulator`` wraps them (``preempt``, ``requests``, ``node_info``, ``startup_log``,
``wait_startup``); ``tests.tpuemu.client`` makes the REST client and polls LROs quickly.

Not emulated: ``ssh-keys`` metadata is not installed on the workers (the testbed key is what
reaches them); node start/stop/reimage, acceleratorTypes/runtimeVersions/locations listings,
operations cancel/delete, queued-resource reset, page tokens (lists return everything),
guest attributes' contents, the GCE metadata server on the workers, quotas, IAM (an optional
``require_auth`` only checks that a ``Bearer`` header is present), and the answer to an
unknown zone (404 NOT_FOUND here; the live service's exact reply was not captured).
"""

from tests.tpuemu.server import TpuEmulator
from tests.tpuemu.workers import WorkerHost

__all__ = ["TpuEmulator", "WorkerHost"]
