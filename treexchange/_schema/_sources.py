"""One read-only view of a state tree, whatever it came from: value trees, lazy file nodes, PyTrees.

:func:`infer_schema` and :func:`validate` walk :class:`Source` nodes, so they work the same on a
``dict`` returned by ``treexchange.load``, on an opened file (lazily: array data is only read when a
checksum is asked for) and on JAX PyTrees (through the JAX bridge's conversion, imported lazily so
this layer never imports jax itself).

A source node answers: its ``kind`` (the inspect kinds, plus ``group`` for a file group), its path,
its Julia type as text when known, ``dtype``/``shape`` for arrays and numbers, its children (with
their path segments) for containers, its scalar value, and an array's sha256.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from .._errors import ConversionError, LimitError, TreePath
from .._juliatype import JuliaType
from .._typeof import julia_type_of, kind_of, numpy_dtype
from .._values import Int128, JuliaArray, JuliaBits, JuliaStruct, NamedTuple, UInt128
from ._checksum import array_sha256
from ._model import MAX_TREE_DEPTH

DEFAULT_ROOT = "model_state"
"""Top-level name given to a single value (not a mapping of names), as Flux's docs save it."""


class Source:
    """A node of a tree being inferred or validated (abstract)."""

    __slots__ = ("path",)

    kind: str
    path: TreePath

    def type_text(self) -> str | None:
        """The Julia type as Julia prints it, when it matters for this kind and is known."""
        return None

    def dtype(self) -> str | None:
        """numpy dtype name for arrays and numbers."""
        return None

    def shape(self) -> tuple[int, ...] | None:
        """Julia-order shape of an array."""
        return None

    def children(self) -> list[tuple[str | int, Source]]:
        """Children in order with their path segments (containers only)."""
        return []

    def scalar(self) -> Any:
        """The value of a number / bool / string / symbol."""
        raise NotImplementedError

    def sha256(self) -> str:
        """sha256 of an array's elements (reads the data)."""
        raise NotImplementedError


# --- value trees ---------------------------------------------------------------------------------


def _dtype_name(value: Any) -> str | None:
    if isinstance(value, Int128):
        return "int128"
    if isinstance(value, UInt128):
        return "uint128"
    if isinstance(value, JuliaBits):
        return None
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, complex):
        return "complex128"
    dtype = getattr(value, "dtype", None)
    return None if dtype is None else np.dtype(dtype).name


def dict_key_segment(key: Any) -> str:
    """The path segment of a Dict key: the key's text (``Symbol("a")`` → ``"a"``, ``3`` → ``"3"``).

    Example:
        >>> dict_key_segment("w"), dict_key_segment(3), dict_key_segment(np.int64(4))
        ('w', '3', '4')
    """
    if isinstance(key, str):
        return str(key)
    if isinstance(key, (bool, np.bool_)):
        return "true" if key else "false"
    if isinstance(key, (int, np.integer)):
        return str(int(key))
    return str(key)


def value_kind(value: Any, path: TreePath) -> str:
    """The inspect kind of a value; a Julia type held as a value (a ``DataType``, which the reader
    returns as a :class:`JuliaType`) is a singleton, as ``inspect`` shows it."""
    if isinstance(value, JuliaType):
        return "singleton"
    return kind_of(value, path=path)


class ValueSource(Source):
    """A value-model value (what ``treexchange.load`` returns), or an array-like leaf."""

    __slots__ = ("kind", "value")

    def __init__(self, value: Any, path: TreePath) -> None:
        self.value = value
        self.path = path
        self.kind = value_kind(value, path)

    def type_text(self) -> str | None:
        v = self.value
        if isinstance(v, JuliaType):
            return "DataType"
        if isinstance(v, (JuliaStruct, JuliaBits)):
            return str(v.type)
        if self.kind == "singleton":
            return str(julia_type_of(v))
        if isinstance(v, JuliaArray):
            return str(julia_type_of(v))
        return None

    def dtype(self) -> str | None:
        return _dtype_name(self.value)

    def shape(self) -> tuple[int, ...] | None:
        return tuple(int(d) for d in self.value.shape)

    def children(self) -> list[tuple[str | int, Source]]:
        v, p = self.value, self.path
        items: Iterable[tuple[str | int, Any]]
        if isinstance(v, NamedTuple):
            items = v.items()
        elif isinstance(v, JuliaStruct):
            items = v.fields.items()
        elif isinstance(v, (tuple, list)):
            items = enumerate(v, 1)
        elif isinstance(v, JuliaArray):
            items = enumerate(v.tolist(), 1)
        elif isinstance(v, dict):
            items = ((dict_key_segment(k), x) for k, x in v.items())
        else:
            return []
        return [(seg, ValueSource(x, (*p, seg))) for seg, x in items]

    def scalar(self) -> Any:
        return self.value

    def sha256(self) -> str:
        return array_sha256(self.value)


class GroupSource(Source):
    """A mapping of names to values standing for a file group (``load`` returns groups as dicts)."""

    __slots__ = ("entries",)
    kind = "group"

    def __init__(self, entries: list[tuple[str | int, Source]], path: TreePath) -> None:
        self.entries = entries
        self.path = path

    def children(self) -> list[tuple[str | int, Source]]:
        return self.entries


# --- lazy file nodes -----------------------------------------------------------------------------


_WIDE_INTS = {"Core.Int128": "int128", "Core.UInt128": "uint128"}


class FileSource(Source):
    """A lazy node of an opened file (``treexchange.open``): walking it reads no array data.

    Uses the node API of :mod:`treexchange._jld2._nodes`: ``kind``, ``julia_type``,
    ``children()`` (segment, child) pairs, ``shape``/``dtype`` on arrays, ``read()``.
    """

    __slots__ = ("kind", "node")

    def __init__(self, node: Any, path: TreePath) -> None:
        self.node = node
        self.path = path
        kind = getattr(node, "kind", None)
        if kind is None and isinstance(node, Mapping):
            kind = "group"
        if kind is None:
            raise ConversionError(f"{type(node).__name__} is not a file node", path=path)
        self.kind = str(kind)

    def _julia_type(self) -> Any:
        return getattr(self.node, "julia_type", None)

    def type_text(self) -> str | None:
        if self.kind not in ("struct", "singleton", "dict", "vector", "number"):
            return None
        t = self._julia_type()
        if t is None:
            return None
        if self.kind == "vector" and str(t) == "Array{Any, 1}":
            return None  # a plain list on the Python side: nothing more to say
        if self.kind == "number" and self.dtype() is not None:
            return None
        return str(t)

    def dtype(self) -> str | None:
        dtype = getattr(self.node, "dtype", None)
        if dtype is not None:
            return dtype if isinstance(dtype, str) else np.dtype(dtype).name
        if self.kind != "number":
            return None
        t = self._julia_type()
        if not isinstance(t, JuliaType):
            return None
        if t.name in _WIDE_INTS:
            return _WIDE_INTS[t.name]
        dt = numpy_dtype(t)
        return None if dt is None else dt.name

    def shape(self) -> tuple[int, ...] | None:
        shape = getattr(self.node, "shape", None)
        return None if shape is None else tuple(int(d) for d in shape)

    def children(self) -> list[tuple[str | int, Source]]:
        node, p = self.node, self.path
        kids = getattr(node, "children", None)
        if callable(kids):
            return [(seg, FileSource(child, (*p, seg))) for seg, child in kids()]
        if isinstance(node, Mapping):
            return [(str(k), FileSource(node[k], (*p, str(k)))) for k in node]
        return []

    def scalar(self) -> Any:
        return self.node.read()

    def sha256(self) -> str:
        return array_sha256(self.node.read())


# --- entry points ------------------------------------------------------------------------------------


def is_file_like(x: Any) -> bool:
    """Whether ``x`` is a path to a file or an opened treexchange file."""
    if isinstance(x, (str, os.PathLike)):
        return True
    from .._jld2._nodes import Group

    return isinstance(x, Group) and not x.path  # an opened File (its root group)


def roots_of(x: Any, *, name: str | None = None) -> list[tuple[str, Source]]:
    """The top-level (name, source) pairs of a value tree or PyTree.

    A plain ``dict`` with ``str`` keys is a mapping of top-level names (what ``load(path)``
    returns); anything else is a single value, named ``name`` (default ``"model_state"``).
    With ``name`` given and ``x`` such a mapping, only that name is used (``"a/b"`` reaches into
    nested groups).
    """
    if isinstance(x, dict) and all(isinstance(k, str) for k in x) and type(x) is dict:
        if name is not None:
            value = _lookup(x, name)
            return [(name.split("/")[0], _wrap_named(name, value))]
        return [(k, _top_level(v, (k,))) for k, v in x.items()]
    root = name or DEFAULT_ROOT
    return [(root.split("/")[0], _wrap_named(root, x))]


def _lookup(tree: dict[str, Any], name: str) -> Any:
    node: Any = tree
    for part in name.split("/"):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(name)
        node = node[part]
    return node


def _wrap_named(name: str, value: Any) -> Source:
    """A ``"a/b"`` name becomes group ``a`` holding ``b``."""
    parts = name.split("/")
    src: Source = _top_level(value, tuple(parts))
    for i in range(len(parts) - 1, 0, -1):
        src = GroupSource([(parts[i], src)], tuple(parts[:i]))
    return src


def _top_level(value: Any, path: TreePath) -> Source:
    return ValueSource(to_values(value, path=path), path)


def to_values(x: Any, *, path: TreePath = ()) -> Any:
    """``x`` itself when it is a value-model tree, else its conversion by the JAX bridge.

    Raises ConversionError (with the path) when ``x`` holds something that is neither.
    """
    try:
        _check_values(x, path, 0)
        return x
    except ConversionError:
        convert = _bridge_converter()
        if convert is None:
            raise
        return convert(x, path=path)


def _check_values(x: Any, path: TreePath, depth: int) -> None:
    # A cheap pre-order walk: does every node have a value-model kind?
    if depth > MAX_TREE_DEPTH:
        # Not a ConversionError: the bridge must not be tried on it (it would only go deeper).
        raise LimitError(
            f"tree deeper than {MAX_TREE_DEPTH} levels, the most a schema document describes", path=path
        )
    kind = value_kind(x, path)
    if kind in ("namedtuple", "struct", "dict", "tuple", "vector"):
        for seg, child in ValueSource(x, path).children():
            _check_values(child.value, (*path, seg), depth + 1)  # type: ignore[attr-defined]


def _bridge_converter() -> Any:
    """The JAX bridge's PyTree → value-tree function, when the bridge is installed."""
    try:
        from .._bridge import to_julia
    except ImportError:
        return None
    return to_julia
