"""What a call did to the state it was given, as the worker sees it: the record that travels
back with the result so the client can redo it with Python's semantics.

- a global the function **rebound** (``global x; x = ...``) is rebound in the notebook: objects
  the user kept (``r1 = x`` before the call) and aliases of the old value stay as they were;
- a global the function **mutated in place** (``hist.append(3)``) is mutated in place in the
  notebook, so its aliases see the change, as they would locally;
- a global rebound to an object another tracked global held before the call (``a = b``) is
  rebound to that global's local object (identity kept);
- a global the function **deleted** is deleted;
- an **argument** the function mutated in place is mutated in place in the caller's object.

Standard library and :mod:`tcl.remote.payload` only: the worker runs in the user's image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tcl.remote import payload


@dataclass
class Outcome:
    result: Any
    changed: dict[str, Any] = field(default_factory=dict)  # new values of changed globals
    rebound: set[str] = field(default_factory=set)  # of those, the ones bound anew
    same_as: dict[str, str] = field(default_factory=dict)  # rebound to what NAME held before
    deleted: list[str] = field(default_factory=list)
    args: dict[int, Any] = field(default_factory=dict)  # positional args mutated in place
    kwargs: dict[str, Any] = field(default_factory=dict)  # keyword args mutated in place


@dataclass
class Before:
    """The tracked state as the call found it."""

    objects: dict[str, Any]  # the tracked globals' objects (held: their ids stay theirs)
    digests: dict[str, bytes | None]
    keys: set[str]
    arg_digests: list[bytes | None]
    kwarg_digests: dict[str, bytes | None]


def before(
    g: dict[str, Any], names: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Before:
    return Before(
        objects={n: g[n] for n in names if n in g},
        digests=payload.digests(g, names),
        keys=set(g),
        arg_digests=[payload.digest(a) for a in args],
        kwarg_digests={k: payload.digest(v) for k, v in kwargs.items()},
    )


def _moved(was: bytes | None, value: Any) -> bool:
    return was is not None and payload.digest(value) != was


def after(
    g: dict[str, Any],
    names: list[str],
    was: Before,
    result: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Outcome:
    out = Outcome(result)
    for n in set(names) | (set(g) - was.keys):
        if n not in g or n.startswith("__") or payload.untracked(g[n]):
            continue
        fresh = n not in was.objects or g[n] is not was.objects[n]
        digest = was.digests.get(n)
        if fresh or digest is None or payload.digest(g[n]) != digest:
            out.changed[n] = g[n]
            if fresh:
                out.rebound.add(n)
                held = next((m for m, o in was.objects.items() if o is g[n] and m != n), None)
                if held is not None:
                    out.same_as[n] = held
    out.deleted = sorted(
        n for n, o in was.objects.items() if n not in g and not payload.untracked(o)
    )
    out.args = {i: a for i, a in enumerate(args) if _moved(was.arg_digests[i], a)}
    out.kwargs = {k: v for k, v in kwargs.items() if _moved(was.kwarg_digests.get(k), v)}
    return out
