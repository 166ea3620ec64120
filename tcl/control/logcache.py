"""Local copies of run events (``<state-dir>/logs/<run>.jsonl``), the cursor for following.

Every event pulled from a runner is appended here before it is shown. A run may have several
nodes and attempts, each with its own runner and its own ``seq`` from 1: the kept copy numbers
them again into one run-wide ``seq`` (the cursor ``tcl logs -f`` resumes from) and remembers
each event's ``node``, ``attempt`` and ``node_seq`` (where the next pull of that node starts).
So ``tcl logs`` works after the host is gone, and a follow that loses its connection resumes
with no lost and no repeated line. Files written before nodes existed read as node 0,
attempt 0.

A run's controller is its cache's one writer, but a second one can come in the moment no lease
holds the run (a ``tcl logs`` catching up as a submit hands its run to the daemon): an append
takes the file's lock and first reads what others appended since it last looked, so two writers
neither repeat an event nor number two events alike.
"""

from __future__ import annotations

import fcntl
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

from pydantic import model_validator

from tcl.atomic import private_opener
from tcl.control.paths import logs_dir, private_dir
from tcl.runner.api import Event, EventKind

ERROR_LINE_CHARS = 300  # a failure's last stderr line, as its run's message shows it


class KeptEvent(Event):
    """An event as kept locally: ``seq`` is run-wide; the node's own is ``node_seq``."""

    node: int = 0
    nodes: int = 1  # how many nodes its attempt has (a log line is prefixed when > 1)
    attempt: int = 0
    node_seq: int = 0
    noun: str = "node"  # what the host calls a node (a TPU pod: worker), for the log prefix

    @model_validator(mode="after")
    def _legacy(self) -> KeptEvent:
        if self.node_seq == 0:  # kept before nodes existed: one runner, its own seq
            self.node_seq = self.seq
        return self


class LogCache:
    def __init__(self, run_id: str, directory: Path | None = None) -> None:
        self.path = (directory or logs_dir()) / f"{run_id}.jsonl"
        self._last: int | None = None
        self._node_last: dict[tuple[int, int], int] | None = None
        self._node_final: dict[tuple[int, int], KeptEvent] = {}  # filled with _node_last
        self._size = 0  # the bytes of the file taken in by _node_last
        self._id: tuple[int, int] | None = None  # the file's (inode, device) they were read from
        # one process's readers share an instance (:func:`kept_log`): a pull in a thread and
        # one on the event loop never take in the same lines twice
        self._lock = threading.RLock()

    def last_seq(self) -> int:
        """The highest ``seq`` stored (0 when nothing is)."""
        if self._node_last is not None:
            self._scan()  # what another writer appended since
        elif self._last is None:
            self._last = 0
            line = _last_line(self.path)
            if line:
                try:
                    self._last = KeptEvent.model_validate_json(line).seq
                except ValueError:  # a torn last line (crash mid-write): rescan
                    self._last = max((e.seq for e in self.read()), default=0)
        return self._last or 0

    def node_last(self, attempt: int, node: int) -> int:
        """The highest ``seq`` of that node's runner kept (0 when none): where its pull starts."""
        return self._scan().get((attempt, node), 0)

    def node_final(self, attempt: int, node: int) -> KeptEvent | None:
        """That node's final state event when it is kept (its runner has nothing more to say)."""
        self._scan()
        return self._node_final.get((attempt, node))

    def attempt_kept(self, attempt: int) -> bool:
        """Some event of the attempt is kept."""
        return any(a == attempt for a, _ in self._scan())

    def _scan(self) -> dict[tuple[int, int], int]:
        """Take in the lines appended since the last look (all of them the first time, or
        when the file was replaced: pruned and kept anew)."""
        with self._lock:
            if self._node_last is None:
                self._node_last, self._size, self._last = {}, 0, 0
            try:
                with open(self.path, "rb") as f:
                    st = os.fstat(f.fileno())
                    if (st.st_ino, st.st_dev) != self._id or st.st_size < self._size:
                        self._node_last, self._size, self._last = {}, 0, 0
                        self._node_final = {}
                        self._id = (st.st_ino, st.st_dev)
                    f.seek(self._size)
                    data = f.read()
            except FileNotFoundError:
                return self._node_last
            whole = data.rfind(b"\n") + 1  # a line being written is taken in once it is whole
            for line in data[:whole].splitlines():
                try:
                    self._note(KeptEvent.model_validate_json(line))
                except ValueError:
                    continue  # torn by a crash mid-write
            self._size += whole
            return self._node_last

    def _note(self, e: KeptEvent) -> None:
        assert self._node_last is not None
        key = (e.attempt, e.node)
        self._node_last[key] = max(self._node_last.get(key, 0), e.node_seq)
        self._last = max(self._last or 0, e.seq)
        if e.kind is EventKind.STATE and e.state is not None and e.state.is_final:
            self._node_final[key] = e

    def append(
        self,
        events: list[Event],
        attempt: int = 0,
        node: int = 0,
        nodes: int = 1,
        noun: str = "node",
    ) -> list[KeptEvent]:
        """Store the node's events newer than what is kept; return exactly those, in order."""
        if not events:
            return []
        private_dir(self.path.parent)
        with self._lock, open(self.path, "ab", opener=private_opener) as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)  # another writer appends after us, not amid
            node_last = self._scan().get((attempt, node), 0)
            # a line left torn by a crash mid-write: this append starts a line of its own (else
            # its first event would be glued to the torn one, and unreadable with it)
            torn = os.fstat(f.fileno()).st_size > self._size
            last = self._last or 0
            fresh = []
            for e in sorted(events, key=lambda e: e.seq):
                if e.seq > node_last:
                    last += 1
                    kept = {
                        "seq": last,
                        "node": node,
                        "nodes": nodes,
                        "attempt": attempt,
                        "node_seq": e.seq,
                        "noun": noun,
                    }
                    fresh.append(KeptEvent(**{**e.model_dump(), **kept}))
                    node_last = e.seq
            if fresh:
                payload = "\n" if torn else ""
                payload += "".join(e.model_dump_json(exclude_none=True) + "\n" for e in fresh)
                f.write(payload.encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
                self._size = f.tell()
                for e in fresh:
                    self._note(e)
        return fresh

    def read(self, after: int = 0, kind: EventKind | None = None) -> Iterator[KeptEvent]:
        """The kept events past ``after`` (only those of ``kind``, when given), in order; see
        :class:`LogTail` (which reads on from where this read ended)."""
        return LogTail(self.path, after, kind).events()

    def last_error_line(self, attempt: int) -> str:
        """The last non-empty line the attempt's job wrote to stderr (looked for in the file's
        last 64 KiB), bounded: what a failure's message shows beside its exit code."""
        for raw in reversed(_tail_lines(self.path)):
            if b'"stream":"stderr"' not in raw:
                continue
            try:
                e = KeptEvent.model_validate_json(raw)
            except ValueError:
                continue
            if e.attempt != attempt or e.kind is not EventKind.LOG:
                continue
            lines = [t.strip() for t in (e.data or "").splitlines() if t.strip()]
            if lines:
                line = lines[-1]
                return line if len(line) <= ERROR_LINE_CHARS else line[:ERROR_LINE_CHARS] + "…"
        return ""


class LogTail:
    """A reader of a kept log that reads on from where it stopped: a follower takes in only
    what was appended since its last read, however long the log grew (a whole read on every
    new event made following a long log quadratic).

    A read ends before a line that is not whole yet: its writer is amid its append (the file
    grows a page at a time, and a reader can meet its end between two). Read on past the end,
    the rest of that line would come as a line of its own, both halves would be skipped as
    torn, and the events after them taken: a follow resuming after the last of those would
    never show that event. The next read takes it whole."""

    def __init__(self, path: Path, after: int = 0, kind: EventKind | None = None) -> None:
        self.path = path
        self.after = after  # the last seq handed over (or skipped: of another kind)
        self.kind = kind
        # Lines are written compact (``"kind":"log"``): a kind's events are found without
        # parsing the others, which a long log has many of.
        self._marker = f'"kind":"{kind.value}"'.encode() if kind is not None else b""
        self._offset = 0
        self._id: tuple[int, int] | None = None

    def pending_bytes(self) -> int:
        """How much was appended past this reader (0 when the file is not there)."""
        try:
            return max(0, self.path.stat().st_size - self._offset)
        except FileNotFoundError:
            return 0

    def read(self, limit: int = 0) -> list[KeptEvent]:
        """The events appended since the last read (at most ``limit`` of them, when > 0)."""
        out: list[KeptEvent] = []
        for e in self.events():
            out.append(e)
            if limit and len(out) >= limit:
                break
        return out

    def events(self) -> Iterator[KeptEvent]:
        """The events appended since the last read, in order, as they are read."""
        try:
            f = open(self.path, "rb")  # noqa: SIM115 (closed below; this is a generator)
        except FileNotFoundError:
            return
        with f:
            st = os.fstat(f.fileno())
            if (st.st_ino, st.st_dev) != self._id or st.st_size < self._offset:
                self._id, self._offset = (st.st_ino, st.st_dev), 0  # replaced: from its start
            f.seek(self._offset)
            for line in f:
                if not line.endswith(b"\n"):
                    return  # being written: taken whole by the next read
                self._offset += len(line)
                seq = _seq_of(line)
                if (seq is not None and seq <= self.after) or self._marker not in line:
                    continue
                try:
                    e = KeptEvent.model_validate_json(line)
                except ValueError:
                    continue  # torn by a crash mid-write (the next append began a new line)
                if e.seq > self.after and (self.kind is None or e.kind is self.kind):
                    self.after = e.seq
                    yield e


def _seq_of(line: bytes) -> int | None:
    """A kept line's ``seq`` without parsing it (its first key), or None."""
    if not line.startswith(b'{"seq":'):
        return None
    end = line.find(b",", 7)
    try:
        return int(line[7:end])
    except ValueError:
        return None


# One instance per kept log in a process: its scan state is reused from pull to pull.
_KEPT: OrderedDict[Path, LogCache] = OrderedDict()
_KEPT_LOCK = threading.Lock()
KEPT_INSTANCES = 256


def kept_log(run_id: str) -> LogCache:
    """The process's :class:`LogCache` of the run: a pull takes in only the lines appended
    since the last one, not the whole log each time (which made keeping a long log
    quadratic)."""
    path = logs_dir() / f"{run_id}.jsonl"
    with _KEPT_LOCK:
        cache = _KEPT.pop(path, None) or LogCache(run_id)
        _KEPT[path] = cache
        while len(_KEPT) > KEPT_INSTANCES:
            _KEPT.popitem(last=False)
    return cache


def _tail_lines(path: Path, size: int = 65536) -> list[bytes]:
    """The whole lines among the file's last ``size`` bytes."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            pos = max(0, end - size)
            f.seek(pos)
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    return lines[1:] if pos > 0 else lines  # the first one may be cut


def _last_line(path: Path) -> str:
    lines = _tail_lines(path)
    return lines[-1].decode("utf-8", "replace") if lines else ""
