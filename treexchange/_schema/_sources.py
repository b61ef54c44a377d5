"""One read-only view of a state tree, whatever it came from: value trees, lazy file nodes, PyTrees.

:func:`infer_schema` and :func:`validate` walk :class:`Source` nodes, so they work the same on a
``dict`` returned by ``treexchange.load``, on an opened file (lazily: array data is only read when a
checksum is asked for) and on JAX PyTrees (through the JAX bridge's conversion, which imports jax
only when it meets a JAX array, so this layer never imports jax itself).

A source node answers: its ``kind`` (the inspect kinds, plus ``group`` for a file group), its path,
its Julia type as text when known, ``dtype``/``shape`` for arrays and numbers, its children (with
their path segments) for containers, its scalar value, and an array's sha256.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .._bridge import to_julia
from .._errors import ConversionError, TreePath, TreexchangeError, in_file
from .._jsonform import array_sha256
from .._juliatype import JuliaType
from .._nodeproto import LazyFile, LazyNode
from .._reader import open as open_file
from .._typeof import julia_type_of, kind_of, presented_dtype_name, wide_int_array
from .._values import (
    BigFloat,
    BigInt,
    Closure,
    Int128,
    JuliaArray,
    JuliaBits,
    JuliaStruct,
    NamedTuple,
    Singleton,
    UInt128,
    value_children,
)

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

    def object_address(self) -> int | None:
        """For a container stored as an object of its own in a file: its address (the same
        object reached twice is shared, or a cycle); ``None`` otherwise."""
        return None


# --- value trees ---------------------------------------------------------------------------------


def _dtype_name(value: Any) -> str | None:
    if isinstance(value, BigInt):
        return None  # no numpy dtype holds it (as for a BigInt node of a file)
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
    return None if dtype is None else dtype_name(dtype)


_DTYPE_NAMES: dict[Any, str] = {}  # cache: numpy dtype -> its name


def dtype_name(dtype: Any) -> str:
    """``np.dtype(dtype).name``, cached (a dtype's name is rebuilt on every access, and a
    20,000-leaf tree asks for a handful of dtypes 40,000 times).

    Example:
        >>> dtype_name(np.dtype("<f4")), dtype_name(np.float64)
        ('float32', 'float64')
    """
    meta = getattr(dtype, "metadata", None)
    if meta is not None:  # Int128 arrays: 16-byte elements labelled int128/uint128 (equal as dtypes)
        return presented_dtype_name(np.dtype(dtype))
    try:
        return _DTYPE_NAMES[dtype]
    except (KeyError, TypeError):
        pass
    name: str = np.dtype(dtype).name
    if len(_DTYPE_NAMES) < 256:  # a handful of dtypes occur; bound it anyway
        try:
            _DTYPE_NAMES[dtype] = name
        except TypeError:
            pass
    return name


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


# Exact type of a value -> its kind, as kind_of decided it the first time (one dict lookup
# instead of an isinstance chain: a 20,000-leaf tree has 40,000 nodes). Tuples and closures are
# not cached (``()`` is a singleton, other tuples are tuples; a closure with captures a struct).
_KIND_BY_TYPE: dict[type, str] = {}

_SINGLETON_TEXT: dict[Any, str] = {}  # cache: singleton value's Julia type text


def value_kind(value: Any, path: TreePath) -> str:
    """The inspect kind of a value-model value (a ``JuliaType`` held as a value is a singleton).

    Example:
        >>> value_kind((), ()), value_kind((1,), ()), value_kind(np.float32(1), ())
        ('singleton', 'tuple', 'number')
    """
    kind = _KIND_BY_TYPE.get(type(value))
    if kind is not None:
        return kind
    if isinstance(value, JuliaType):
        return "singleton"  # a DataType held as a value: inspect shows it as a singleton
    kind = kind_of(value, path=path)
    if not isinstance(value, (tuple, Closure)) and len(_KIND_BY_TYPE) < 256:
        _KIND_BY_TYPE[type(value)] = kind
    return kind


def _singleton_text(value: Any) -> str:
    if value is None:
        return "Nothing"
    if isinstance(value, JuliaType):
        return "DataType"
    key = value.type if isinstance(value, Singleton) else value
    try:
        return _SINGLETON_TEXT[key]
    except (KeyError, TypeError):
        pass
    text = str(julia_type_of(value))
    try:
        if len(_SINGLETON_TEXT) < 4096:
            _SINGLETON_TEXT[key] = text
    except TypeError:
        pass
    return text


class ValueSource(Source):
    """A value-model value (what ``treexchange.load`` returns), or an array-like leaf."""

    __slots__ = ("kind", "value", "wide")

    def __init__(self, value: Any, path: TreePath, kind: str | None = None) -> None:
        self.value = value
        self.path = path
        self.kind = kind or value_kind(value, path)
        # An Int128/UInt128 JuliaArray is an array (as the file shows it), not a vector of numbers.
        self.wide = wide_int_array(value) if self.kind == "vector" else None
        if self.wide is not None:
            self.kind = "array"

    def type_text(self) -> str | None:
        v = self.value
        if self.kind == "singleton":
            return _singleton_text(v)
        if isinstance(v, (JuliaStruct, JuliaBits, Closure)):  # (a closure here: one with captures)
            return str(v.type)
        if isinstance(v, JuliaArray) and self.wide is None:
            return str(julia_type_of(v))
        if isinstance(v, (BigInt, BigFloat)):
            # No numpy dtype: the type names the number, as a file's node does (``BigInt``).
            return type_text(julia_type_of(v))
        return None

    def dtype(self) -> str | None:
        if self.wide is not None:
            return presented_dtype_name(self.wide.dtype)
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
        elif isinstance(v, Closure):
            items = value_children(v) or ()  # (its captures, the fields of its struct type)
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
        return array_sha256(self.wide if self.wide is not None else self.value)

    def object_address(self) -> int | None:
        # The value's identity, for what is mutable in Julia (what load returns for a Vector{Any},
        # a Dict, a mutable struct): the same object reached twice is shared, or a cycle.
        v = self.value
        if isinstance(v, (list, dict, JuliaArray)) and self.kind in ("vector", "dict"):
            return id(v)
        if isinstance(v, JuliaStruct) and v.mutable:
            return id(v)
        return None


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


_TYPE_TEXT: dict[Any, str] = {}


def type_text(t: Any) -> str:
    """``str(t)`` of a Julia type, cached: a file repeats a few types (``Tuple{}``, a layer's
    struct type) thousands of times and printing one walks its whole parameter tree."""
    try:
        return _TYPE_TEXT[t]
    except (KeyError, TypeError):
        pass
    text = str(t)
    if len(_TYPE_TEXT) < 4096:
        try:
            _TYPE_TEXT[t] = text
        except TypeError:
            pass
    return text


_LEAF_KINDS = frozenset({"array", "number", "bool", "string", "symbol", "singleton"})


class FileSource(Source):
    """A lazy node of an opened file (``treexchange.open``): walking it reads no array data.

    Uses the node protocol (:mod:`treexchange._nodeproto`) and nothing else, so JLD2 files and
    plain HDF5 files are walked alike.
    """

    __slots__ = ("kind", "node")

    def __init__(self, node: LazyNode, path: TreePath) -> None:
        self.node = node
        self.path = path
        self.kind = node.kind

    def type_text(self) -> str | None:
        if self.kind not in ("struct", "singleton", "dict", "vector", "number"):
            return None
        t = self.node.julia_type
        if self.kind == "vector" and type_text(t) == "Array{Any, 1}":
            return None  # a plain list on the Python side: nothing more to say
        if self.kind == "number" and self.dtype() is not None:
            return None
        return type_text(t)

    def dtype(self) -> str | None:
        # A number's node gives its Julia type's numpy dtype (the node protocol's scalar rule);
        # the schema also names the 128-bit integers numpy has no dtype for.
        dtype = self.node.dtype
        if dtype is not None:
            return dtype_name(dtype)
        return _WIDE_INTS.get(self.node.julia_type.name) if self.kind == "number" else None

    def shape(self) -> tuple[int, ...] | None:
        shape = self.node.shape
        return None if shape is None else tuple(map(int, shape))

    def children(self) -> list[tuple[str | int, Source]]:
        p = self.path
        return [(seg, FileSource(child, (*p, seg))) for seg, child in self.node.children()]

    def scalar(self) -> Any:
        return self.node.read()

    def sha256(self) -> str:
        value = self.node.read()
        wide = wide_int_array(value)  # Int128 arrays load as JuliaArrays of Int128 values
        return array_sha256(value if wide is None else wide)

    def object_address(self) -> int | None:
        if self.kind in _LEAF_KINDS:
            return None
        return self.node.object_address


# --- entry points ------------------------------------------------------------------------------------


def is_file_like(x: Any) -> bool:
    """Whether ``x`` is a path to a file or an opened treexchange file (``treexchange.open``)."""
    return isinstance(x, (str, os.PathLike, LazyFile))


@contextmanager
def opened(x: str | os.PathLike[str] | LazyFile) -> Iterator[LazyFile]:
    """An opened file for a path (closed afterwards), or ``x`` itself when it is already open."""
    if isinstance(x, (str, os.PathLike)):
        with in_file(x), open_file(x) as file:  # JLD2 or BSON.jl, as treexchange.open tells them
            yield file
    else:
        yield x


def file_roots(file: LazyFile, name: str | None) -> list[tuple[str, Source]]:
    if name is None:
        return [(str(key), FileSource(file[key], (str(key),))) for key in file]
    parts = name.strip("/").split("/")
    try:
        node = file[name]
    except KeyError:
        raise TreexchangeError(f"no entry named {name!r} in the file") from None
    src: Source = FileSource(node, tuple(parts))
    for i in range(len(parts) - 1, 0, -1):
        src = GroupSource([(parts[i], src)], tuple(parts[:i]))
    return [(parts[0], src)]


def roots_of(x: Any, *, name: str | None = None) -> list[tuple[str, Source]]:
    """The top-level (name, source) pairs of a value tree or PyTree.

    A plain ``dict`` with ``str`` keys is a mapping of top-level names (what ``load(path)``
    returns); anything else is a single value, named ``name`` (default ``"model_state"``).
    With ``name`` given (``"a/b"`` reaches into nested groups), a mapping in which ``name`` is
    found stands for all names and only ``name`` is used; otherwise ``x`` is the value of ``name``
    (what ``load(path, name)`` returns).
    """
    if type(x) is dict and all(isinstance(k, str) for k in x):
        if name is None:
            return [(k, _top_level(v, (k,))) for k, v in x.items()]
        try:
            value = _lookup(x, name)
        except KeyError:
            # Not the mapping of all names: the value of ``name`` itself, as
            # ``load(path, name)`` returns it (a group comes back as a dict).
            value = x
        return [(name.split("/")[0], _wrap_named(name, value))]
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
    return (
        ValueSource(value, path) if is_value_tree(value, path) else ValueSource(to_values(value, path), path)
    )


def is_value_tree(x: Any, path: TreePath = ()) -> bool:
    """Whether ``x``'s root has a value-model kind (deeper nodes are checked as they are walked:
    :func:`with_bridge` retries through the JAX bridge when one of them has none)."""
    try:
        value_kind(x, path)
    except ConversionError:
        return False
    return True


def to_values(x: Any, path: TreePath = ()) -> Any:
    """``x`` converted by the JAX bridge (PyTree -> value tree); ConversionError if impossible."""
    return to_julia(x, path=path)


def with_bridge(roots: list[tuple[str, Source]], work: Any) -> Any:
    """``work(roots)``; when a value deep inside has no value-model kind (a PyTree holding an
    Equinox module, a dataclass ...), convert those roots through the JAX bridge and run again.

    The common case (a value tree, or a PyTree of dicts, tuples and arrays) costs one walk.
    """
    try:
        return work(roots)
    except ConversionError:
        converted = [(name, _converted(src)) for name, src in roots]
        return work(converted)


def _converted(src: Source) -> Source:
    if isinstance(src, ValueSource):
        return ValueSource(to_values(src.value, src.path), src.path)
    if isinstance(src, GroupSource):
        return GroupSource([(seg, _converted(child)) for seg, child in src.entries], src.path)
    return src
