"""The job's own environment: the shipped project's, built with uv on the host.

A job whose shipped tree holds a project (a ``pyproject.toml`` with its ``uv.lock``, or one
that declares a ``[project]`` without a lock; the nearest from the job's directory up to the
tree's root) runs with that project's environment, not the runner's: ``uv sync --frozen``
(without a lock: ``uv sync``, which resolves it and writes the ``uv.lock`` into the job's own
copy of the tree, as ``uv run`` would for its user) builds it once per host under
``<envs>/<key>``, the key a hash of the lock, the pyproject, ``.python-version``, the groups and
the platform, so every later run (and every node sharing the directory) reuses it; uv's cache
is shared between builds.
The project itself is not installed into it (its tree changes with every submit): its root,
and ``src/`` where it has one, lead the job's ``PYTHONPATH``, as an editable install would.

The runner starts the job as ``python -I -S .../tcl/runner/projectenv.py --root R --envs D
[--group G] -- ARGV`` (a script of the standard library only, without site: a fast start):
it builds (or finds) the environment under a lock, its progress on the job's own log, then
``exec``s ARGV with the environment's ``bin`` first on ``PATH``: the job keeps its pid and its
process group, a stop during the build stops uv, and a build that fails
ends the job with uv's last lines before anything of the job ran.

In an image (the docker executor, a SLURM container) the environment is built on the image's
``python3`` (``--base-python``: never a Python uv would download), keyed by that interpreter
too, and sees the image's packages after the project's (``include-system-site-packages``): the
image's environment, plus the project's lock; uv's cache is then kept beside the environments
(a container's home goes with it).

Without a uv project the job runs as before, with the host's (or the image's) environment.
Standard library only (it runs before the job, on the job's critical path).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# subprocess, shutil and collections.deque are imported where a build needs them: a job whose
# environment exists pays only for this module's start (what bench/project_env.py measures)

PYPROJECT = "pyproject.toml"
LOCK = "uv.lock"
PYTHON_VERSION = ".python-version"
READY = ".tcl-ready"  # written once the environment is complete
UV_ENV = "TCL_RUNNER_UV"  # the uv to use (default: the one installed with tcl, else PATH's)
BUILD_FAILED = 3  # the job's exit code when its environment cannot be built
TAIL_LINES = 20
UV_CACHE = ".uv-cache"  # in an image: uv's cache, beside the environments (never collected)


def declares_project(pyproject: Path) -> bool:
    """Whether ``pyproject`` has a ``[project]`` table (one holding only tools' settings, or
    one that does not parse, is no project uv could sync)."""
    import tomllib

    try:
        return isinstance(tomllib.loads(pyproject.read_text()).get("project"), dict)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def find_project(job_dir: Path, top: Path) -> Path | None:
    """The nearest directory from ``job_dir`` up to ``top`` with a pyproject.toml and its
    uv.lock, or a pyproject.toml declaring a ``[project]`` (None: the job is in no project)."""
    here = job_dir
    while True:
        pyproject = here / PYPROJECT
        if pyproject.is_file() and ((here / LOCK).is_file() or declares_project(pyproject)):
            return here
        if here == top or here.parent == here or top not in here.parents:
            return None
        here = here.parent


def env_key(root: Path, groups: Sequence[str], base_python: str | None = None) -> str:
    """What the environment depends on: the lock, the pyproject (its requires-python and
    groups), the pinned Python, the groups asked for and the platform; in an image, the
    image's interpreter it is built on (``base_python``: its path, size and mtime, a stat)."""
    h = hashlib.sha256()
    if base_python is not None:
        st = os.stat(base_python)
        h.update(f"base\0{base_python}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    for name in (LOCK, PYPROJECT, PYTHON_VERSION):
        h.update(name.encode() + b"\0")
        try:
            h.update((root / name).read_bytes())
        except FileNotFoundError:
            h.update(b"-")
        h.update(b"\0")
    for group in sorted(set(groups)):
        h.update(b"group\0" + group.encode() + b"\0")
    h.update(f"{sys.platform}\0{os.uname().machine}".encode())
    return h.hexdigest()[:24]


def uv_binary() -> str | None:
    """The uv to build with: ``$TCL_RUNNER_UV``, the one installed with tcl, else PATH's."""
    chosen = os.environ.get(UV_ENV)
    if chosen:
        return chosen
    beside = Path(sys.executable).parent / "uv"  # the `uv` distribution, a dependency of tcl
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    import shutil

    return shutil.which("uv")


def job_env_of(env_dir: Path, root: Path, base: Mapping[str, str]) -> dict[str, str]:
    """``base`` with the environment active: its ``bin`` first on PATH, ``VIRTUAL_ENV`` set,
    the project's root (and ``src/``) leading ``PYTHONPATH``."""
    env = dict(base)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(env_dir)
    env["PATH"] = os.pathsep.join(p for p in (str(env_dir / "bin"), base.get("PATH", "")) if p)
    paths = [str(root)]
    if (root / "src").is_dir():
        paths.append(str(root / "src"))
    if base.get("PYTHONPATH"):
        paths.append(base["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def tcl_import_dir(where: Path) -> str:
    """A directory holding only the ``tcl`` package (a link to the runner's): put on the
    path of a program of tcl's run in the project's environment (the ``@tcl.remote`` call
    server), it imports tcl and nothing else of the runner's environment."""
    import tcl

    here = where / "tcl-import"
    link = here / "tcl"
    here.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not link.is_symlink():
        link.symlink_to(Path(tcl.__file__).parent, target_is_directory=True)
    return str(here)


class BuildFailed(Exception):
    def __init__(self, code: int, tail: list[str]) -> None:
        super().__init__(f"uv sync exited with {code}")
        self.code = code
        self.tail = tail


def acquire(
    root: Path, envs: Path, groups: Sequence[str], uv: str, base_python: str | None = None
) -> tuple[Path, bool, int]:
    """The environment of the project at ``root``, built now or found built, and held: its
    path, whether this call built it, and the descriptor of a shared ``flock`` on its lock
    (inheritable: the job keeps it across ``exec``, and so does whatever it starts; the
    shim's collector removes no environment whose lock is held: ``tcl.shim.derivedgc``).
    ``base_python``: build it on that interpreter (an image's), its packages seen below the
    project's."""
    key = env_key(root, groups, base_python)
    target = envs / key
    envs.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(envs / f"{key}.lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    built = False
    try:
        while True:
            fcntl.flock(fd, fcntl.LOCK_SH)
            if (target / READY).is_file():
                os.utime(target / READY)  # used now: the collector goes by this
                os.set_inheritable(fd, True)
                return target, built, fd
            fcntl.flock(fd, fcntl.LOCK_UN)
            fcntl.flock(fd, fcntl.LOCK_EX)  # one build per key on the host; others wait for it
            if not (target / READY).is_file():
                _build(root, target, groups, uv, base_python)
                built = True
            fcntl.flock(fd, fcntl.LOCK_UN)
    except BaseException:
        os.close(fd)
        raise


def _build(
    root: Path, target: Path, groups: Sequence[str], uv: str, base_python: str | None
) -> None:
    """``uv sync`` into ``target`` (under the key's exclusive lock); its output to stderr."""
    import shutil
    import subprocess
    from collections import deque

    shutil.rmtree(target, ignore_errors=True)  # what a killed build left
    # with a lock: exactly it; without: resolved now (the lock goes into the job's own copy)
    argv = [uv, "sync", "--no-install-project"]
    if (root / LOCK).is_file():
        argv.insert(2, "--frozen")
    for group in groups:
        argv += ["--group", group]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME")}
    env["UV_PROJECT_ENVIRONMENT"] = str(target)
    if base_python is not None:
        # the image's interpreter, never one uv would download; a container's home is gone
        # with it, so uv's cache lives beside the environments (shared by the host's builds)
        argv += ["--python", base_python]
        env.setdefault("UV_CACHE_DIR", str(target.parent / UV_CACHE))
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    proc = subprocess.Popen(
        argv,
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode(errors="replace").rstrip("\n")
        tail.append(line)
        print(line, file=sys.stderr, flush=True)
    code = proc.wait()
    if code != 0:
        shutil.rmtree(target, ignore_errors=True)
        raise BuildFailed(code, list(tail))
    if base_python is not None:
        see_base_packages(target)
    (target / READY).write_text(f"{' '.join(argv)}\n")


def see_base_packages(target: Path) -> None:
    """The environment at ``target`` sees its base interpreter's packages after its own (a
    venv's ``include-system-site-packages``): the image's environment, plus the project's."""
    cfg = target / "pyvenv.cfg"
    lines = [
        ln
        for ln in cfg.read_text().splitlines()
        if ln.split("=", 1)[0].strip() != "include-system-site-packages"
    ]
    cfg.write_text("\n".join([*lines, "include-system-site-packages = true"]) + "\n")


USAGE = (
    "usage: projectenv.py --root DIR --envs DIR [--group NAME]... [--base-python PATH] "
    "[--ready-line LINE] -- COMMAND..."
)


class Args:
    """The launcher's arguments (a plain class: ``dataclasses`` costs 12 ms to import)."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.envs: Path | None = None
        self.group: list[str] = []
        self.base_python: str | None = None  # an image's interpreter to build on
        self.ready_line = ""  # printed once the environment is there (the runner's phase mark)
        self.argv: list[str] = []


def parse(words: Sequence[str]) -> Args | None:
    """The runner's own call (``tcl.runner.command``): options, ``--``, the job's command."""
    args, rest = Args(), list(words)
    while rest:
        word = rest.pop(0)
        if word == "--":
            args.argv = rest
            break
        if word not in ("--root", "--envs", "--group", "--base-python", "--ready-line") or not rest:
            return None
        value = rest.pop(0)
        if word == "--ready-line":
            args.ready_line = value
        elif word == "--base-python":
            args.base_python = value
        elif word == "--group":
            args.group.append(value)
        elif word == "--root":
            args.root = Path(value)
        else:
            args.envs = Path(value)
    return args if args.root is not None and args.envs is not None else None


def main(args_in: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if args_in is None else args_in)
    if args is None or args.root is None or args.envs is None:
        print(USAGE, file=sys.stderr)
        return 2
    argv = args.argv
    if not argv:
        print("tcl: no command to run", file=sys.stderr)
        return 2
    uv = uv_binary()
    if uv is None:
        print("tcl: uv is not installed on this host: the job runs in the host's environment")
        return _exec(argv, dict(os.environ))
    groups = f" with groups {', '.join(args.group)}" if args.group else ""
    t0 = time.monotonic()
    try:
        env_dir, built, _held = acquire(args.root, args.envs, args.group, uv, args.base_python)
    except BuildFailed as e:
        print(
            f"tcl: the job's environment could not be built (uv sync{groups} exited with "
            f"{e.code}); the job did not start. uv said:",
            file=sys.stderr,
        )
        for line in e.tail[-5:]:
            print(f"  {line}", file=sys.stderr)
        last = next((ln for ln in reversed(e.tail) if ln.strip()), "")
        print(f"tcl: environment build failed: {last.strip()}", file=sys.stderr, flush=True)
        return BUILD_FAILED
    except OSError as e:
        print(f"tcl: environment build failed: {e}", file=sys.stderr, flush=True)
        return BUILD_FAILED
    took = time.monotonic() - t0
    how = f"built in {took:.1f} s" if built else "reused"
    print(f"tcl: the project's environment{groups}: {env_dir.name} ({how})", flush=True)
    if args.ready_line:
        print(args.ready_line, flush=True)
    return _exec(argv, job_env_of(env_dir, args.root, os.environ))


def _exec(argv: list[str], env: dict[str, str]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        print(f"tcl: cannot start {argv[0]}: {e}", file=sys.stderr, flush=True)
        return 127


if __name__ == "__main__":
    sys.exit(main())
