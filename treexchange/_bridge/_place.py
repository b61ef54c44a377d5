"""Placement: turn restored numpy arrays (zero-copy views of the memory-mapped file) into the kind
of array the template holds at that place.

A numpy template leaf gives a numpy array, a jax leaf (``jax.Array``, ``jax.ShapeDtypeStruct``) a
jax array on the template's own device or sharding, unless ``numpy=True`` (numpy everywhere) or
``sharding=`` covers the leaf (a jax array placed that way). :meth:`Placer.holds` tells the dtype
the result will have (JAX without x64 holds no 64-bit dtypes); the caller checks values against
it beforehand, so nothing here ever narrows a value (``jax.device_put`` would do so silently).

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

from ._classify import is_jax_array
from ._exact import convert

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
        import jax  # jax is costly to import: loaded on first use

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
        else the template's own: an abstract ``jax.ShapeDtypeStruct``'s ``.sharding``, or a jax
        array's when it was placed explicitly (committed); ``None`` means the default device."""
        explicit = self._explicit(keypath)
        if explicit is not None:
            return explicit
        if _is_abstract(template):
            return getattr(template, "sharding", None)
        if is_jax_array(template) and getattr(template, "committed", False):
            return template.sharding
        return None

    def to_numpy(self, template: Any, keypath: KeyPath) -> bool:
        """Whether the leaf becomes a numpy array: ``numpy=True``, or a numpy template leaf that
        no ``sharding=`` entry asks to place."""
        if self.numpy:
            return True
        return isinstance(template, np.ndarray) and self._explicit(keypath) is None

    def holds(self, dtype: np.dtype, *, to_numpy: bool) -> np.dtype:
        """The dtype an array of ``dtype`` has once placed: itself for numpy; for jax the dtype jax
        holds (``int64 -> int32``, ``float64 -> float32``... while ``jax_enable_x64`` is off)."""
        dtype = np.dtype(dtype)
        if to_numpy:
            return dtype
        import jax  # jax is costly to import: loaded on first use

        return np.dtype(jax.dtypes.canonicalize_dtype(dtype))

    def place(self, array: np.ndarray, dtype: np.dtype | None, keypath: KeyPath, template: Any = None) -> Any:
        """Materialise one leaf from a (memory-mapped) numpy array, converted to ``dtype`` if given.

        ``dtype`` is the final dtype (checked by the caller): JAX receives an array it holds as it
        is, so ``device_put`` never narrows."""
        if self.to_numpy(template, keypath):
            return array if dtype is None or array.dtype == dtype else convert(array, dtype)
        import jax  # jax is costly to import: loaded on first use

        sharding = self.sharding_for(keypath, template)
        if sharding is None or isinstance(sharding, jax.sharding.SingleDeviceSharding):
            # device_put copies straight out of the mmap view; no intermediate numpy copy.
            return jax.device_put(array if dtype is None else convert(array, dtype), sharding)
        return jax.make_array_from_callback(tuple(array.shape), sharding, _slicer(array, dtype))

    def keep(self, value: Any, keypath: KeyPath, dtype: np.dtype | None = None) -> Any:
        """A template array kept as it is (``allow_missing``), as the kind of array it is (or the
        ``sharding=`` entry asks for); ``dtype`` as in :meth:`place`."""
        if self.to_numpy(value, keypath):
            return np.asarray(value)
        import jax  # jax is costly to import: loaded on first use

        sharding = self._explicit(keypath)
        if isinstance(value, jax.Array) and (sharding is None or value.sharding == sharding):
            return value
        if dtype is not None:
            value = convert(np.asarray(value), dtype)
        return jax.device_put(value, sharding)

    def _explicit(self, keypath: KeyPath) -> Any:
        """The ``sharding=`` entry covering this key path, or None."""
        if self._single is not None:
            return self._single
        if self._table is not None:
            for n in range(len(keypath), -1, -1):
                found = self._table.get(tuple(keypath[:n]), _NOTHING)
                if found is not _NOTHING:
                    return found
        return None


def _slicer(array: np.ndarray, dtype: np.dtype | None) -> Callable[[Any], np.ndarray]:
    def read_shard(index: Any) -> np.ndarray:
        # Slicing the file-backed view touches only this shard's pages.
        part = array[index]
        return part if dtype is None else convert(part, dtype)

    return read_shard


def _is_abstract(x: Any) -> bool:
    import jax  # jax is costly to import: loaded on first use

    return isinstance(x, jax.ShapeDtypeStruct)


class _Nothing:
    pass


_NOTHING = _Nothing()
