"""The client's half of a call's outcome (:mod:`tcl.remote.outcome`): the notebook's state
changed as the call would have changed it had it run here.

A global bound anew remotely is bound anew here (what the user kept of its old value stays
as it was); one mutated in place is mutated in place here (its aliases see it), for the types
whose state can be replaced in place (lists, dicts, sets, bytearrays, writable numpy arrays of
the same shape and dtype, plain objects' ``__dict__``), else bound anew; a deleted global is
deleted; a mutated argument is mutated in the caller's object. A global that changed here
while the call ran is left alone (a conflict, warned about)."""

from __future__ import annotations

import sys
import warnings
from typing import Any, Protocol

from tcl.remote import payload
from tcl.remote.capture import Shipment
from tcl.remote.outcome import Outcome


class ConflictWarning(UserWarning):
    """A global changed locally while the remote call ran; the remote value was not applied."""


class Stats(Protocol):
    changed: list[str]
    written: list[str]
    conflicts: list[str]


def _same_ndarray(old: Any, new: Any) -> bool:
    np = sys.modules.get("numpy")
    return (
        np is not None
        and type(old) is np.ndarray
        and type(new) is np.ndarray
        and old.shape == new.shape
        and old.dtype == new.dtype
        and bool(old.flags.writeable)
    )


def update_in_place(old: Any, new: Any) -> bool:
    """Give ``old`` the state of ``new`` without replacing it; False when its type has no way."""
    if old is new:
        return True
    if type(old) is not type(new):
        return False
    if isinstance(old, list | bytearray):
        old[:] = new
    elif isinstance(old, dict | set):
        old.clear()
        old.update(new)
    elif _same_ndarray(old, new):
        old[...] = new
    elif hasattr(old, "__dict__") and not payload.untracked(old) and not hasattr(old, "__slots__"):
        vars(old).clear()
        vars(old).update(vars(new))
    else:
        return False
    return True


def _unchanged_here(shipment: Shipment, g: dict[str, Any], name: str) -> bool:
    was = shipment.local_digests.get(name, "absent")
    now = payload.digest(g[name]) if name in g else "absent"
    return was == now


def write_back(shipment: Shipment, done: Outcome, stats: Stats) -> Any:
    """Apply the call's outcome to the notebook; its result, as the object this side holds
    where the call returned one of the objects it was given."""
    g = shipment.fn.__globals__
    stats.changed = sorted({*done.changed, *done.deleted})
    local_of: dict[int, Any] = {}  # the remote object -> the object here that stands for it
    for name in stats.changed:
        if not _unchanged_here(shipment, g, name):
            stats.conflicts.append(name)
            continue
        stats.written.append(name)
        if name in done.deleted:
            g.pop(name, None)
            continue
        new = done.changed[name]
        if name in done.same_as and done.same_as[name] in shipment.local_objects:
            g[name] = local_of[id(new)] = shipment.local_objects[done.same_as[name]]
        elif name in done.rebound or name not in g or id(new) in local_of:
            g[name] = local_of.get(id(new), new)
        elif update_in_place(g[name], new):
            local_of[id(new)] = g[name]
        else:
            g[name] = new
    for i, new in done.args.items():
        if i < len(shipment.args) and update_in_place(shipment.args[i], new):
            local_of[id(new)] = shipment.args[i]
    for key, new in done.kwargs.items():
        if key in shipment.kwargs and update_in_place(shipment.kwargs[key], new):
            local_of[id(new)] = shipment.kwargs[key]
    if stats.conflicts:
        warnings.warn(
            f"tcl.remote: {', '.join(stats.conflicts)} changed locally while "
            f"{shipment.fn.__qualname__} ran remotely; the remote values were not written back",
            ConflictWarning,
            stacklevel=4,
        )
    return local_of.get(id(done.result), done.result)
