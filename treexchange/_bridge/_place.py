"""Placement: turn restored numpy arrays (zero-copy views of the memory-mapped file) into jax arrays.

With a ``jax.sharding.Sharding`` each leaf is built with ``jax.make_array_from_callback``: the
callback receives the index of one device's shard and slices the file-backed numpy array, so each
device copies only the pages of its own slice. ``sharding`` may also be a PyTree of shardings that
is a prefix of the template (the way orbax and ``jax.jit(out_shardings=...)`` take them); ``None``
in that tree means "default device" for the subtree below it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

KeyPath = tuple[Any, ...]


class Placer:
    """Places array leaves: numpy (``numpy=True``), default device, or a (per-leaf) sharding."""

    def __init__(self, *, numpy: bool, sharding: Any) -> None:
        self.numpy = numpy
        self._single: Any = None
        self._table: dict[KeyPath, Any] | None = None
        if sharding is None:
            return
        if numpy:
            raise ValueError("sharding= places jax arrays; it cannot be combined with numpy=True")
        import jax

        if isinstance(sharding, jax.sharding.Sharding):
            self._single = sharding
            return

        def is_leaf(x: Any) -> bool:
            return x is None or isinstance(x, jax.sharding.Sharding)

        pairs, _ = jax.tree_util.tree_flatten_with_path(sharding, is_leaf=is_leaf)
        for keypath, leaf in pairs:
            if leaf is not None and not isinstance(leaf, jax.sharding.Sharding):
                raise ValueError(
                    f"sharding tree leaf at {jax.tree_util.keystr(keypath)} is a {type(leaf).__name__}, "
                    "not a jax.sharding.Sharding or None"
                )
        self._table = {tuple(kp): leaf for kp, leaf in pairs}

    def sharding_for(self, keypath: KeyPath, template: Any = None) -> Any:
        """The sharding for the leaf at this JAX key path (the nearest prefix in the sharding tree);
        else the template's own sharding when it is an abstract ``jax.ShapeDtypeStruct``."""
        if self._single is not None:
            return self._single
        if self._table is not None:
            for n in range(len(keypath), -1, -1):
                found = self._table.get(tuple(keypath[:n]), _NOTHING)
                if found is not _NOTHING:
                    if found is not None:
                        return found
                    break
        return getattr(template, "sharding", None) if _is_abstract(template) else None

    def place(self, array: np.ndarray, dtype: np.dtype | None, keypath: KeyPath, template: Any = None) -> Any:
        """Materialise one leaf from a (memory-mapped) numpy array, cast to ``dtype`` if given."""
        if self.numpy:
            return array if dtype is None or array.dtype == dtype else array.astype(dtype)
        import jax

        sharding = self.sharding_for(keypath, template)
        if sharding is None:
            # device_put copies straight out of the mmap view; no intermediate numpy copy.
            return jax.device_put(array if dtype is None else array.astype(dtype))
        return jax.make_array_from_callback(tuple(array.shape), sharding, _slicer(array, dtype))

    def keep(self, value: Any, keypath: KeyPath) -> Any:
        """A template array kept as it is (``allow_missing``): numpy or (re)placed jax array."""
        if self.numpy:
            return np.asarray(value)
        import jax

        sharding = self.sharding_for(keypath)
        if sharding is None:
            return value if isinstance(value, jax.Array) else jax.device_put(value)
        return jax.device_put(value, sharding)


def _slicer(array: np.ndarray, dtype: np.dtype | None) -> Callable[[Any], np.ndarray]:
    def read_shard(index: Any) -> np.ndarray:
        # Slicing the file-backed view touches only this shard's pages.
        part = array[index]
        return part if dtype is None else part.astype(dtype)

    return read_shard


def _is_abstract(x: Any) -> bool:
    import jax

    return isinstance(x, jax.ShapeDtypeStruct)


class _Nothing:
    pass


_NOTHING = _Nothing()
