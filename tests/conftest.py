"""Shared pytest setup: markers by folder, and the fixtures of tests/testbed.py (real services)
and tests/browser.py (headless chromium)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ["tests.testbed", "tests.browser", "tests.tiertimes"]

_TESTS = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    """The signals a terminal sends take their usual course in the tests and what they start,
    however the suite was started: a shell's background job ignores SIGINT and SIGQUIT, and
    ``nohup`` SIGHUP; each process inherits that, and the tests of Ctrl-C and hang-ups failed
    (a `tcl repl` that Ctrl-C did not stop, a SIGHUP relayed to a command that ignored it)."""
    del config
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_IGN:
            default = signal.default_int_handler if sig is signal.SIGINT else signal.SIG_DFL
            signal.signal(sig, default)


# Under pytest-xdist (`scripts/test.sh` runs `-n N --dist loadgroup`) a worker takes whole
# groups. The testbeds with fixed addresses (the sshd hosts' namespaces and bridge, PostgreSQL's
# and Redis's ports, the Kubernetes emulator's pod bridge) exist once per machine, so every test
# that uses one is in one group, run by one worker; so are the SLURM tests (one cluster started,
# not one per worker). Every other test goes with its module: a module's warm fixtures start once.
_ONE_PER_MACHINE = {
    "ssh_testbed": "lab",
    "postgres_url": "lab",
    "juicefs_volume": "lab",
    "slurm_cluster": "slurm",
    # the Kubernetes emulators share one pod bridge (br-k8semu): one removing it as the last
    # pod leaves raced another attaching a pod (seen in CI with two workers)
    "k8semu_factory": "k8s",
}


def xdist_group_of(item: pytest.Item) -> str:
    """The xdist group an item runs in (see above)."""
    for fixture in getattr(item, "fixturenames", ()):
        if fixture in _ONE_PER_MACHINE:
            return _ONE_PER_MACHINE[fixture]
    return str(Path(str(item.fspath)).relative_to(_TESTS))


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if _TESTS / "unit" in path.parents:
            item.add_marker(pytest.mark.unit)
        elif _TESTS / "integration" in path.parents:
            item.add_marker(pytest.mark.integration)
        item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Refuse to run when xdist dropped the groups (tests sharing a testbed would run at once
    in two workers): it happened silently with pytest 9.2 (pytest-dev/pytest-xdist#1386)."""
    items = session.items
    grouped = session.config.getoption("loadgroup", default=False)  # set on xdist workers
    if items and grouped and "@" not in items[0].nodeid:
        raise pytest.UsageError("pytest-xdist --dist loadgroup did not group the tests")


# `tcl submit` hands its work to a `tcl serve` daemon it starts when none answers (one per
# state dir, so one per test's HOME). In tests they go soon after their last request, and
# whatever is left when the session ends is stopped here.
os.environ.setdefault("TCL_SERVE_IDLE_EXIT_S", "20")

# One JAX compilation cache for the session: a job that inherits the tests' environment (the
# local default's jobs, tcl.jobs run by the tests themselves) finds what an earlier test compiled
# (a tiny training job: 11 CPU-s cold, 5 warm). Every program is cached, not only those that
# took over 1 s (JAX's default), so a hit does not depend on the load. The workers inherit the
# controller's. A test of the host's own cache drops both (test_compile_cache_local.py).
SESSION_JAX_CACHE = ("JAX_COMPILATION_CACHE_DIR", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS")
if "PYTEST_XDIST_WORKER" not in os.environ and SESSION_JAX_CACHE[0] not in os.environ:
    os.environ[SESSION_JAX_CACHE[0]] = tempfile.mkdtemp(prefix="tcl-test-jax-cache-")
    os.environ.setdefault(SESSION_JAX_CACHE[1], "0")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller made it
        cache = os.environ.get(SESSION_JAX_CACHE[0], "")
        if Path(cache).name.startswith("tcl-test-jax-cache-"):
            shutil.rmtree(cache, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _stop_serve_daemons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    yield
    from tcl.control.daemon.client import stop_daemon

    for record in tmp_path_factory.getbasetemp().glob("**/serve/daemon.sock"):
        stop_daemon(record.parent)
