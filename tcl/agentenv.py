"""What environment the local agents and the jobs start with: an allow-list, never the whole
environment of whichever shell happened to start them.

``tcl submit --secret NAME`` reads ``NAME`` from the user's shell; ``tcl serve`` and the local
shim, started by that submit, used to inherit the whole shell (secrets, cloud keys...) and hand
it to every later job. Now:

- **the daemon** (``tcl serve``) keeps :data:`BASE`, the network settings, what it needs to
  reach hosts (``SSH_AUTH_SOCK``, the Kubernetes and Google Cloud credential *paths*, docker's
  settings) and tcl's own settings (:data:`TCL_SETTINGS`, ``TCL_SHIM_*``, ``TCL_RUNNER_*``);
- **the local shim** keeps :data:`BASE`, the network settings, docker's settings and its own and
  its runners' settings (``TCL_SHIM_*``, ``TCL_RUNNER_*``, ``TCL_TRACE``);
- **a job on the process executor** starts from :data:`BASE` and the network settings of the
  shim's environment (plus ``LD_LIBRARY_PATH``, ``CUDA_HOME``: where a host's GPU libraries
  are; ``TPU_*``: what a TPU VM image says of its chips), then tcl's variables, the submit's
  ``--env`` and its own ``--secret`` values (``tcl.runner.jobenv``). On the docker executor
  the base is the image's environment. On this machine (the local default) the submitting
  shell's :data:`BASE` variables (``PATH``...) win over the shim's: each submit carries them
  (:func:`submitter_env`), so a job runs with its submitter's ``PATH``, not the daemon's.

Standard library only (the CLI's path to the daemon imports it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

#: Every agent and job: who and where the user is, how text is encoded, where temp files go.
BASE = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM"}
)
BASE_PREFIXES = ("LC_", "XDG_")
#: How this machine reaches the network (a proxy, a company CA).
NETWORK = frozenset(
    {
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
    }
)
DOCKER = frozenset({"DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY"})
#: tcl's own settings that the daemon reads (named one by one: a user's secret may be called
#: ``TCL_SOMETHING`` too).
TCL_SETTINGS = frozenset(
    {
        "TCL_STATE_DIR",
        "TCL_DB_URL",
        "TCL_CONFIG",
        "TCL_CODE_CACHE_DIR",
        "TCL_SERVE",
        "TCL_SERVE_IDLE_EXIT_S",
        "TCL_SERVE_LEASE_S",
        "TCL_SERVE_ORPHANS_EVERY_S",
        "TCL_SERVE_IDLE_HOSTS_EVERY_S",
        "TCL_TRACE",
        "TCL_TPU_API_ENDPOINT",
        "TCL_TPU_CREDENTIALS",
        "TCL_REMOTE_IDLE_S",
        "TCL_SCHEDULER_NAME",
    }
)
#: coverage.py's request to measure a process (set by the test command's ``coverage run``; the
#: agents and runners of a measured session are measured too). No secret in it.
MEASUREMENT = frozenset({"COVERAGE_PROCESS_CONFIG", "COVERAGE_PROCESS_START"})
#: the local shim's and its runners' settings (the daemon starts the local shim)
AGENT_PREFIXES = ("TCL_SHIM_", "TCL_RUNNER_")
DAEMON = (
    BASE
    | NETWORK
    | DOCKER
    | TCL_SETTINGS
    | MEASUREMENT
    | {
        "SSH_AUTH_SOCK",
        "KUBECONFIG",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "CLOUDSDK_CONFIG",
        "NO_COLOR",
    }
)
DAEMON_PREFIXES = (*BASE_PREFIXES, *AGENT_PREFIXES, "TPU_")
SHIM = BASE | NETWORK | DOCKER | MEASUREMENT | {"TCL_TRACE"}
SHIM_PREFIXES = (*BASE_PREFIXES, *AGENT_PREFIXES, "TPU_")
JOB = BASE | NETWORK | MEASUREMENT | {"LD_LIBRARY_PATH", "CUDA_HOME"}
# the runner's settings (it keeps them from the job); what a TPU VM image says of its chips
JOB_PREFIXES = (*BASE_PREFIXES, "TCL_RUNNER_", "TPU_")


def allowed(
    env: Mapping[str, str], names: Iterable[str], prefixes: tuple[str, ...] = ()
) -> dict[str, str]:
    """The entries of ``env`` named in ``names`` or starting with one of ``prefixes``."""
    keep = frozenset(names)
    return {k: v for k, v in env.items() if k in keep or k.startswith(prefixes)}


def daemon_env(env: Mapping[str, str]) -> dict[str, str]:
    return allowed(env, DAEMON, DAEMON_PREFIXES)


def shim_env(env: Mapping[str, str]) -> dict[str, str]:
    return allowed(env, SHIM, SHIM_PREFIXES)


def job_base_env(env: Mapping[str, str]) -> dict[str, str]:
    return allowed(env, JOB, JOB_PREFIXES)


def submitter_env(env: Mapping[str, str]) -> dict[str, str]:
    """What a submit carries of its shell (:data:`BASE`: ``PATH``, ``LANG``, ``TZ``...): a job
    that runs on this machine (the local default) starts from these, the submitter's, not from
    those of whichever shell started the daemon. Never a secret: these names only."""
    return allowed(env, BASE, BASE_PREFIXES)
