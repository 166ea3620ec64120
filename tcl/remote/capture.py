"""What a call ships: the globals its function touches, checked to be picklable first.

cloudpickle already ships a `__main__`/dynamic function by value with only the globals its code
objects name (`_extract_code_globals`). We compute the same set, transitively through helper
functions of the same module, because those are the names the worker watches for changes and
the client may write back."""

from __future__ import annotations

import builtins
import contextlib
import dis
import linecache
import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from tcl.remote import payload
from tcl.remote.errors import UnpicklableError

_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL"})


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """`code` and every code object nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _global_names(code: types.CodeType) -> set[str]:
    return {
        str(ins.argval)
        for co in _code_objects(code)
        for ins in dis.get_instructions(co)
        if ins.opname in _GLOBAL_OPS
    }


def _same_module_functions(fn: types.FunctionType, value: Any) -> list[types.FunctionType]:
    """Functions reached through `value` whose globals are `fn`'s: their names matter too."""
    if isinstance(value, types.FunctionType) and value.__globals__ is fn.__globals__:
        return [value]
    return []


def referenced_globals(fn: types.FunctionType) -> list[str]:
    """Names `fn` reads or writes in its module globals, through helpers and closures of the
    same module. Modules are left out (they go by reference), and so are builtins the module does
    not define itself. Names a `global x` statement creates are included."""
    g = fn.__globals__
    names: set[str] = set()
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        reached = _global_names(f.__code__)
        names |= reached
        for name in reached:
            if name in g:
                todo += _same_module_functions(fn, g[name])
        for cell in f.__closure__ or ():
            with contextlib.suppress(ValueError):  # an empty cell
                todo += _same_module_functions(fn, cell.cell_contents)
    return sorted(
        n
        for n in names
        if not (n in g and isinstance(g[n], types.ModuleType))
        and not (n not in g and hasattr(builtins, n))
    )


def ships_by_value(fn: types.FunctionType) -> bool:
    """Whether cloudpickle ships `fn` with its globals (functions of `__main__`, of dynamic
    modules, or of modules registered by value), mirroring cloudpickle's own rule. Functions of
    importable modules go by reference and see the remote module's globals: nothing of those is
    written back."""
    module_name = getattr(fn, "__module__", None)
    if module_name is None or module_name == "__main__":
        return True
    module = sys.modules.get(module_name)
    if module is None or getattr(module, "__spec__", None) is None:
        return True
    if module_name in cloudpickle.list_registry_pickle_by_value():
        return True
    obj: Any = module
    for part in fn.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is not fn


def _unpicklable(value: Any) -> str | None:
    try:
        payload.dumps(value)
    except Exception as e:
        return f"({_type_name(value)}) cannot be pickled: {type(e).__name__}: {e}"
    return None


def _type_name(value: Any) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def diagnose(
    fn: types.FunctionType, names: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, str]:
    """Every part of the call that cannot be pickled, described for the user."""
    g = fn.__globals__
    failures: dict[str, str] = {}
    for name in names:
        if name in g and (msg := _unpicklable(g[name])) is not None:
            failures[f"global {name!r}"] = msg
    for i, cell in enumerate(fn.__closure__ or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if (msg := _unpicklable(value)) is not None:
            failures[f"closure variable {fn.__code__.co_freevars[i]!r}"] = msg
    for i, arg in enumerate(args):
        if (msg := _unpicklable(arg)) is not None:
            failures[f"argument {i}"] = msg
    for key, arg in kwargs.items():
        if (msg := _unpicklable(arg)) is not None:
            failures[f"argument {key!r}"] = msg
    return failures


def _pseudo_sources(fn: types.FunctionType, names: list[str]) -> dict[str, list[str]]:
    """Source lines of code that exists only in this process (notebook cells, `<string>`), so
    the remote traceback can show the failing line; real files are left to the remote copy."""
    codes = [fn.__code__] + [
        v.__code__ for n in names if isinstance(v := fn.__globals__.get(n), types.FunctionType)
    ]
    out: dict[str, list[str]] = {}
    for code in codes:
        path = code.co_filename
        if path in out or os.path.exists(path):
            continue
        lines = linecache.getlines(path)
        if lines:
            out[path] = lines
    return out


@dataclass
class Shipment:
    """A call ready to send: the payload and what the write-back needs afterwards."""

    fn: types.FunctionType
    names: list[str]
    body: bytes
    local_digests: dict[str, bytes | None] = field(default_factory=dict)
    # the objects the call was given: the tracked globals' (an identity a rebinding to one of
    # them keeps) and the arguments (mutated in place when the call mutated its copies)
    local_objects: dict[str, Any] = field(default_factory=dict)
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    # its large arrays by digest, left out of ``body``: sent to a worker that lacks them
    blobs: dict[bytes, Any] = field(default_factory=dict)


def prepare(fn: types.FunctionType, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Shipment:
    """Pickle the call, or raise UnpicklableError naming every offending part (nothing sent)."""
    by_value = ships_by_value(fn)
    names = referenced_globals(fn) if by_value else []
    sources = _pseudo_sources(fn, names) if by_value else {}
    try:
        # One pickling in the common case; the per-name diagnosis only runs when it fails.
        body, blobs = payload.dumps_call((fn, args, kwargs, names, sources))
    except Exception as e:
        failures = diagnose(fn, names, args, kwargs) or {
            f"function {fn.__qualname__!r}": f"cannot be pickled: {type(e).__name__}: {e}"
        }
        raise UnpicklableError(failures) from e
    # Digested after pickling, in this process: the write-back compares against these.
    g = fn.__globals__
    return Shipment(
        fn,
        names,
        body,
        payload.digests(g, names),
        {n: g[n] for n in names if n in g},
        args,
        kwargs,
        blobs,
    )
