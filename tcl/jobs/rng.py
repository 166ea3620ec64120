"""`rng.npy`: the Python, NumPy and exact JAX random state of a checkpoint, as one `.npy` array.

The file is a single 0-d structured array, so `np.load("rng.npy")` (no pickles) reads it as the
seed's table says, with named fields: `python_state`, `numpy_keys`, `jax_key_data`,
`jax_key_impl`, ... The JAX key is kept as its raw data and implementation name, not a seed, so
a key that was split or folded restores exactly. Files written by older tcl versions (an `.npz`
archive under the same name) still load.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import jax
import numpy as np


def save_rng(path: Path, key: jax.Array | None) -> None:
    py_version, py_state, py_gauss = random.getstate()
    np_state = np.random.get_state(legacy=True)
    assert isinstance(np_state, tuple)
    values: dict[str, tuple[Any, Any, tuple[int, ...]]] = {
        "python_state": (np.asarray(py_state, np.uint64), "<u8", (len(py_state),)),
        "python_version": (py_version, "<i8", ()),
        "python_has_gauss": (py_gauss is not None, "?", ()),
        "python_gauss": (py_gauss or 0.0, "<f8", ()),
        "numpy_keys": (np.asarray(np_state[1], np.uint32), "<u4", (len(np_state[1]),)),
        "numpy_pos": (np_state[2], "<i8", ()),
        "numpy_has_gauss": (np_state[3], "<i8", ()),
        "numpy_gauss": (np_state[4], "<f8", ()),
    }
    if key is not None:
        data = np.asarray(jax.random.key_data(key))
        impl = str(jax.random.key_impl(key))
        values["jax_key_data"] = (data, data.dtype.str, data.shape)
        values["jax_key_impl"] = (impl, f"<U{max(len(impl), 1)}", ())
    dtype = np.dtype([(name, fmt, shape) for name, (_, fmt, shape) in values.items()])
    record = np.zeros((), dtype)
    for name, (value, _, _) in values.items():
        record[name] = value
    with path.open("wb") as f:
        np.save(f, record, allow_pickle=False)


def load_rng(path: Path) -> jax.Array | None:
    """Restore Python and NumPy global state; return the exact JAX key (or None)."""
    loaded = np.load(path, allow_pickle=False)
    if isinstance(loaded, np.lib.npyio.NpzFile):
        with loaded as z:
            return _load_npz(z)
    fields = loaded.dtype.names or ()
    gauss = float(loaded["python_gauss"]) if bool(loaded["python_has_gauss"]) else None
    state = tuple(int(v) for v in loaded["python_state"])
    random.setstate((int(loaded["python_version"]), state, gauss))
    np.random.set_state(
        (
            "MT19937",
            np.asarray(loaded["numpy_keys"]),
            int(loaded["numpy_pos"]),
            int(loaded["numpy_has_gauss"]),
            float(loaded["numpy_gauss"]),
        )
    )
    if "jax_key_data" not in fields:
        return None
    data = jax.numpy.asarray(loaded["jax_key_data"])
    key: jax.Array = jax.random.wrap_key_data(data, impl=str(loaded["jax_key_impl"]))
    return key


def _load_npz(z: Any) -> jax.Array | None:
    """The archive tcl wrote before rng.npy became one array."""
    version, has_gauss = (int(v) for v in z["python_meta"])
    gauss = float(z["python_gauss"][0]) if has_gauss else None
    random.setstate((version, tuple(int(v) for v in z["python_state"]), gauss))
    pos, np_has_gauss = (int(v) for v in z["numpy_meta"])
    np.random.set_state(("MT19937", z["numpy_keys"], pos, np_has_gauss, float(z["numpy_gauss"][0])))
    if "jax_key_data" not in z:
        return None
    key: jax.Array = jax.random.wrap_key_data(z["jax_key_data"], impl=str(z["jax_key_impl"]))
    return key
