"""`notebook()`: code executed as a notebook cell would be (module `__main__`, source only in
linecache). The real worker subprocess behind @remote is tests/integration/remote/conftest.py's."""

from __future__ import annotations

import itertools
import linecache
import textwrap
from typing import Any

_cells = itertools.count()


def notebook(src: str, ns: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run `src` like a notebook cell in `ns` (a fresh `__main__` namespace by default)."""
    ns = {"__name__": "__main__"} if ns is None else ns
    src = textwrap.dedent(src)
    path = f"<cell-{next(_cells)}>"
    lines = src.splitlines(keepends=True)
    linecache.cache[path] = (len(src), None, lines, path)  # as IPython registers its cells
    exec(compile(src, path, "exec"), ns)
    return ns
