"""Plain HDF5 files (no JLD2 header), read through h5py into treexchange's value model.

Only used when the caller opts in (``treexchange.open(path, allow_hdf5=True)`` or
``load(..., allow_hdf5=True)``). Mapping, as JLD2.jl itself reads such files:

* groups -> mappings (``read()`` gives nested ``dict``);
* numeric / bool datasets -> numpy arrays in Julia order: HDF5 dims reversed, F-ordered view of
  the same bytes (``order="storage"`` keeps h5py's C-ordered shape); scalars -> numpy scalars;
* strings -> ``str``; compounds -> :class:`treexchange.NamedTuple` of their members;
  variable-length sequences -> numpy arrays (numbers) or lists;
* object references -> the referenced value (a NULL reference -> :data:`treexchange.UNDEF`);
  empty (null) datasets -> ``None``;
* N-d datasets of strings, compounds or references -> :class:`treexchange.JuliaArray` in Julia's
  shape (1-d references: a ``list``, like JLD2's ``Vector{Any}``).

Element types come from :mod:`treexchange._typeof` (the one numpy <-> Julia mapping); a dtype
with no Julia counterpart (``float128``, opaque bytes) raises :class:`UnsupportedError`.
Arrays are copies (h5py reads into memory), not memory maps. ``limits`` are checked before
h5py allocates anything, reference and group cycles are refused. libhdf5 always verifies the
checksums of the metadata it reads, so ``verify_checksums`` adds nothing for these files.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ._errors import (
    ConversionError,
    FormatError,
    LimitError,
    PathSegment,
    TreePath,
    TreexchangeError,
    UnsupportedError,
    WrongFormatError,
    format_path,
)
from ._jld2._nodes import array_protocol
from ._juliatype import JuliaType
from ._limits import DEFAULT_LIMITS, Limits
from ._nodeproto import CONTAINER_KINDS, ClosingFile, scalar_dtype, scalar_shape, walk_leaves
from ._typeof import ANY, STRING, julia_eltype, julia_type_of, kind_of
from ._values import UNDEF, Closure, JuliaArray, JuliaStruct, NamedTuple, Symbol, value_children


def _h5py() -> Any:
    import h5py  # only plain HDF5 files need it: the JLD2 codec never does

    return h5py


def plain_eltype(dtype: np.dtype) -> JuliaType:
    """The Julia element type JLD2 reads an HDF5 dataset of this (h5py) dtype as.

    Example:
        >>> import h5py
        >>> str(plain_eltype(np.dtype("<f4"))), str(plain_eltype(h5py.string_dtype()))
        ('Float32', 'String')
        >>> str(plain_eltype(np.dtype([("a", "<i4"), ("b", "<f8")])))
        'NamedTuple{(:a, :b), Tuple{Int32, Float64}}'
    """
    h5py = _h5py()
    if dtype.fields is not None:
        assert dtype.names is not None
        names = tuple(Symbol(n) for n in dtype.names)
        types = tuple(plain_eltype(dtype.fields[n][0]) for n in dtype.names)
        return JuliaType("Core.NamedTuple", (names, JuliaType("Core.Tuple", types)))
    if dtype.subdtype is not None:  # an HDF5 array member: a Julia array of its base type
        base, shape = dtype.subdtype
        return JuliaType("Core.Array", (plain_eltype(base), np.int64(len(shape))))
    if h5py.check_string_dtype(dtype) is not None or dtype.kind in "SU":
        return STRING
    if h5py.check_ref_dtype(dtype) is not None:
        return ANY
    vlen = h5py.check_vlen_dtype(dtype)
    if vlen is not None:
        return JuliaType("Core.Array", (plain_eltype(np.dtype(vlen)), np.int64(1)))
    try:
        return julia_eltype(dtype)
    except ConversionError:
        raise UnsupportedError(f"HDF5 datatype {dtype} has no Julia counterpart") from None


def _is_numeric(dtype: np.dtype) -> bool:
    return dtype.fields is None and dtype.subdtype is None and dtype.kind in "biufc"


class _Reading:
    """One read: limits, order, and the objects being read (reference and group cycles)."""

    def __init__(self, h5: Any, limits: Limits, order: str) -> None:
        self.h5 = h5
        self.limits = limits
        self.order = order
        self.busy: set[int] = set()

    def obj(self, obj: Any, path: TreePath) -> Any:
        """The value of a group or dataset."""
        h5py = _h5py()
        if len(path) > self.limits.max_depth or len(self.busy) > self.limits.max_depth:
            raise LimitError(f"values nested deeper than max_depth={self.limits.max_depth}", path=path)
        addr = _address(obj)
        if addr in self.busy:
            raise UnsupportedError("reference or link cycle (an object contains itself)", path=path)
        self.busy.add(addr)
        try:
            if isinstance(obj, h5py.Group):
                return {k: self.obj(obj[k], (*path, k)) for k in obj}
            if obj.shape is None:
                return None
            check_size(obj.shape, obj.dtype, self.limits, path)
            return self.value(obj[()], obj.dtype, path)
        finally:
            self.busy.discard(addr)

    def value(self, value: Any, dtype: np.dtype, path: TreePath) -> Any:
        """A value h5py returned for data of ``dtype`` (an array, a record, a scalar)."""
        if isinstance(value, np.ndarray) and dtype.subdtype is None:
            if _is_numeric(value.dtype):
                plain_eltype(value.dtype)  # refuse dtypes Julia has no type for
                if value.ndim == 0:
                    return value[()]
                return value.T if self.order == "julia" else value
            if value.ndim == 0:
                return self.value(value[()], dtype, path)
            return self.array(value, dtype, path)
        if isinstance(value, np.ndarray):  # an HDF5 array member (dtype.subdtype)
            return self.value(value, value.dtype, path)
        h5py = _h5py()
        if isinstance(value, h5py.Reference):
            return self.obj(self.h5[value], path) if value else UNDEF
        if isinstance(value, (bytes, str)):
            text = _text(value)
            if len(text) > self.limits.max_string_bytes:
                raise LimitError("string longer than max_string_bytes", path=path)
            return text
        if isinstance(value, np.void) and dtype.fields is not None:
            assert dtype.names is not None
            return NamedTuple((n, self.value(value[n], dtype.fields[n][0], (*path, n))) for n in dtype.names)
        if isinstance(value, np.generic) and _is_numeric(value.dtype):
            plain_eltype(value.dtype)
            return value
        raise UnsupportedError(f"HDF5 datatype {dtype} is not supported for plain HDF5 files", path=path)

    def array(self, value: np.ndarray, dtype: np.dtype, path: TreePath) -> Any:
        """An N-d array of non-numbers: JuliaArray in Julia's shape (1-d references: a list)."""
        h5py = _h5py()
        vlen = h5py.check_vlen_dtype(dtype)
        item_dtype = np.dtype(vlen) if vlen is not None and h5py.check_string_dtype(dtype) is None else dtype
        flat = value.reshape(-1)  # storage (C) order = Julia's column-major order
        items = [self.value(v, item_dtype, (*path, i)) for i, v in enumerate(flat, 1)]
        if h5py.check_ref_dtype(dtype) is not None and value.ndim == 1:
            return items
        data = np.empty(len(items), dtype=object)
        data[:] = items
        shaped = data.reshape(value.shape)
        return JuliaArray(plain_eltype(dtype), shaped.T if self.order == "julia" else shaped)


def _address(obj: Any) -> int:
    return int(_h5py().h5o.get_info(obj.id).addr)


def check_size(shape: tuple[int, ...], dtype: np.dtype, limits: Limits, path: TreePath) -> None:
    """Refuse a dataset that ``limits`` do not allow, before h5py allocates it."""
    n = 1
    for d in shape:
        n *= int(d)
    if _is_numeric(dtype):
        if n * dtype.itemsize > limits.max_array_bytes:
            raise LimitError(f"array of {n * dtype.itemsize} bytes exceeds max_array_bytes", path=path)
    elif n > limits.max_elements:
        raise LimitError(f"array of {n} elements exceeds max_elements={limits.max_elements}", path=path)


def _text(v: Any) -> str:
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)


def storage_index(index: Any) -> tuple[Any, ...] | None:
    """The h5py index (HDF5 dims) for a numpy index in Julia's shape, when h5py can read that
    part alone: integers, positive-step slices and one ``...``. ``None``: read all, then index.

    Julia's first axis is HDF5's last, so the index is reversed and anchored at the end.

    Example:
        >>> storage_index(0), storage_index((1, slice(None))), storage_index((Ellipsis, 2))
        ((Ellipsis, 0), (Ellipsis, slice(None, None, None), 1), (2, Ellipsis))
        >>> storage_index([0, 2]) is None
        True
    """
    idx = index if isinstance(index, tuple) else (index,)
    for i in idx:
        if i is Ellipsis:
            continue
        if isinstance(i, slice):
            if i.step is not None and (not isinstance(i.step, (int, np.integer)) or i.step < 1):
                return None
            continue
        if not isinstance(i, (int, np.integer)) or isinstance(i, (bool, np.bool_)):
            return None
    ellipses = [k for k, i in enumerate(idx) if i is Ellipsis]
    if len(ellipses) > 1:
        return None
    if ellipses:
        k = ellipses[0]
        return (*reversed(idx[k + 1 :]), Ellipsis, *reversed(idx[:k]))
    return (Ellipsis, *reversed(idx))


class ValueNode:
    """A node over an already-read value (compound scalars, string vectors of plain HDF5 files):
    kind, Julia type and children come from the value itself. Indexing is the value's: fields and
    dict entries by key, tuple and vector elements by 0-based position (as for JLD2 nodes)."""

    object_address: int | None = None  # part of a dataset's value, not an object of its own
    _budget: int | None = None  # the file's node budget for leaves(), handed down to children

    def __init__(self, value: Any, path: TreePath, budget: int | None = None) -> None:
        self._value = value
        self.path = path
        self.kind = kind_of(value, path=path)
        self.julia_type = julia_type_of(value, path=path)
        self._budget = budget

    @property
    def shape(self) -> tuple[int, ...] | None:
        """An array's or a vector's shape; ``()`` for a number or a Bool; ``None`` otherwise (the
        protocol's rule: a JLD2 node of the same value says the same)."""
        v = self._value
        if isinstance(v, (JuliaArray, np.ndarray)):
            return tuple(v.shape)
        if isinstance(v, list):
            return (len(v),)
        return scalar_shape(self.kind)

    @property
    def dtype(self) -> np.dtype | None:
        """An array's numpy dtype; a number's or a Bool's is that of its Julia type
        (:func:`treexchange._nodeproto.scalar_dtype`: ``None`` for an Int128, a BigInt, a
        pointer's bits, which numpy would call ``object``); ``None`` for every other kind (a
        string, a container: a list of arrays has none), so a JLD2 node of the same value
        describes it alike."""
        if self.kind == "array":
            return np.asarray(self._value).dtype
        return scalar_dtype(self.kind, self.julia_type)

    def read(self, *, order: str = "julia", mmap: bool = True) -> Any:
        """The value (already read; ``order`` and ``mmap`` change nothing)."""
        return self._value

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return array_protocol(np.asarray(self._value), dtype, copy)

    def _items(self) -> list[tuple[PathSegment, Any, Any]]:
        """``(segment, key, value)`` of every child."""
        v = self._value
        if isinstance(v, (NamedTuple, dict)):
            return [(k if isinstance(k, str) else str(k), k, x) for k, x in v.items()]
        if isinstance(v, (tuple, list)):
            return [(i + 1, i, x) for i, x in enumerate(v)]
        if isinstance(v, JuliaArray):
            return [(i + 1, i, x) for i, x in enumerate(v.tolist())]
        if isinstance(v, JuliaStruct):
            return [(k, k, x) for k, x in v.fields.items()]
        if isinstance(v, Closure) and v.captures:  # (the fields of its struct type)
            return [(k, k, x) for k, x in value_children(v) or ()]
        return []

    def __len__(self) -> int:
        if self.kind not in CONTAINER_KINDS:
            raise TypeError(f"a {self.kind} node has no length")
        return len(self._items())

    def _child(self, value: Any, path: TreePath) -> ValueNode:
        """The node of a child value (subclasses hand out their own kind of node)."""
        return ValueNode(value, path, self._budget)

    def children(self) -> Iterator[tuple[PathSegment, ValueNode]]:
        for seg, _, x in self._items():
            yield seg, self._child(x, (*self.path, seg))

    def leaves(self) -> Iterator[tuple[TreePath, Any]]:
        """``(path, node)`` of every leaf at or below this node (:func:`walk_leaves`)."""
        return walk_leaves(self, self._node_budget())

    def _node_budget(self) -> int:
        """How many nodes :meth:`leaves` may visit: the file's bound (``Limits.max_nodes``) for a
        value read from a plain HDF5 file, at any depth below it; the default bound otherwise."""
        return DEFAULT_LIMITS.nodes_for(0) if self._budget is None else self._budget

    def __iter__(self) -> Iterator[Any]:
        """Tuple and vector elements (as nodes), or the keys of fields and dict entries."""
        if self.kind in ("tuple", "vector"):
            return (child for _, child in self.children())
        return iter(k for _, k, _ in self._items())

    def __repr__(self) -> str:
        return f"<ValueNode {format_path(self.path)}: {self.kind} {self.julia_type}>"

    def __getitem__(self, key: Any) -> Any:
        if self.kind == "array":
            # An array's elements, as a JLD2 array node gives them (Julia's shape): a converter
            # reads one device's slice of a leaf through this (orbax), whatever file it is from.
            return np.asarray(self)[key]
        items = self._items()
        if self.kind in ("tuple", "vector") and isinstance(key, (int, np.integer)):
            i = int(key) + (len(items) if key < 0 else 0)
            if not 0 <= i < len(items):
                raise IndexError(f"index {key} out of range for {len(items)} elements")
            seg, _, x = items[i]
            return self._child(x, (*self.path, seg))
        for seg, k, x in items:
            if self.kind not in ("tuple", "vector") and k == key:
                return self._child(x, (*self.path, seg))
        raise KeyError(key)


class PlainNode:
    """A dataset or group of a plain HDF5 file; numeric arrays are read when asked.

    Numeric arrays index like :class:`treexchange.Node` arrays: in Julia's shape (HDF5 dims
    reversed), reading only the selected part when h5py can; other datasets are read at once
    and index like the value they hold (fields by name, elements by 0-based position).
    """

    def __init__(self, file: PlainFile, obj: Any, path: TreePath) -> None:
        h5py = _h5py()
        self._file = file
        self._obj = obj
        self.path = path
        self._value_node: ValueNode | None = None
        if len(path) > file.limits.max_depth:
            raise LimitError(f"groups nested deeper than max_depth={file.limits.max_depth}", path=path)
        if isinstance(obj, h5py.Group):
            self.kind = "group"
            self.julia_type = JuliaType("JLD2.Group")
            return
        dt = obj.dtype
        if obj.shape is not None and obj.ndim > 0 and _is_numeric(dt):
            self.kind = "array"
            self.julia_type = JuliaType("Core.Array", (plain_eltype(dt), np.int64(obj.ndim)))
            return
        # Anything else is small or structured: read it and describe the value.
        self._value_node = ValueNode(self.read(), path, file.limits.nodes_for(file.file_size))
        self.kind = self._value_node.kind
        self.julia_type = self._value_node.julia_type

    @property
    def file_size(self) -> int:
        return self._file.file_size

    @property
    def object_address(self) -> None:
        """``None``: h5py objects are not walked by address (groups nest at most
        ``max_depth`` deep, reference cycles are refused when read)."""
        return None

    @property
    def shape(self) -> tuple[int, ...] | None:
        """Julia's shape (HDF5 dims reversed); ``None`` for a group."""
        if self.kind == "group":
            return None
        if self._value_node is not None:
            return self._value_node.shape
        return tuple(reversed(self._obj.shape or ()))

    @property
    def dtype(self) -> np.dtype | None:
        """A numeric array's numpy dtype (as h5py reports it); for anything else what the node of
        its value says (a number's dtype, ``None`` for a string or a compound's fields, the
        protocol's rule); ``None`` for a group."""
        if self._value_node is not None:
            return self._value_node.dtype
        return None if self.kind == "group" else self._obj.dtype

    def read(self, *, order: str = "julia", mmap: bool = True) -> Any:
        """The value (read through h5py into memory of its own, so ``mmap`` changes nothing)."""
        return self._file._guard(
            lambda: _Reading(self._file._h5, self._file.limits, order).obj(self._obj, self.path)
        )

    def __getitem__(self, index: Any) -> Any:
        if self.kind == "group":
            if not isinstance(index, str):
                raise KeyError(index)
            return self._file._node(self._obj, index, self.path)
        if self._value_node is not None:
            return self._value_node[index]
        obj = self._obj
        sel = storage_index(index)
        if sel is None:
            part = np.asarray(self.read())[index]
        else:
            part = np.asarray(self._file._guard(lambda: obj[sel])).T
        return part[()] if isinstance(part, np.ndarray) and part.ndim == 0 else part

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        # h5py reads into fresh memory: a copy already, so copy=True need not copy again.
        return array_protocol(np.asarray(self.read()), dtype, None if copy else copy)

    def __iter__(self) -> Iterator[Any]:
        if self.kind == "group":
            return iter(self._obj)
        if self._value_node is not None:
            return iter(self._value_node)
        raise TypeError(f"a {self.kind} node is not iterable")

    def __len__(self) -> int:
        if self.kind == "group":
            return len(self._obj)
        if self._value_node is not None:
            return len(self._value_node)
        if not self.shape:
            raise TypeError("len() of a 0-dimensional array")
        return self.shape[0]

    def children(self) -> Iterator[tuple[PathSegment, PlainNode | ValueNode]]:
        if self.kind == "group":
            for k in self._obj:
                yield k, self._file._node(self._obj, k, self.path)
        elif self._value_node is not None:
            yield from self._value_node.children()

    def leaves(self) -> Iterator[tuple[TreePath, Any]]:
        """``(path, node)`` of every leaf at or below this node (:func:`walk_leaves`)."""
        return walk_leaves(self, self._file.limits.nodes_for(self._file.file_size))

    def __repr__(self) -> str:
        return f"<PlainNode {format_path(self.path)}: {self.kind} {self.julia_type}>"


class HeaderlessRoot(ClosingFile):
    """The root group of a file without a JLD2 header (plain HDF5, BSON.jl) as a node: a group
    at the empty path, stored as no object of its own; ``producer`` and ``header`` are empty."""

    producer = ""
    header = ""
    legacy_header = False
    kind = "group"
    julia_type = JuliaType("JLD2.Group")
    path: tuple[str, ...] = ()
    object_address = None  # (see PlainNode.object_address)
    shape = None  # a group: no array access
    dtype = None


class PlainFile(Mapping[str, PlainNode], HeaderlessRoot):
    """A plain HDF5 file opened with ``allow_hdf5=True`` (read through h5py).

    Mirrors :class:`treexchange.File`: a mapping of top-level names to nodes, ``read``,
    ``attrs``, ``close``; ``format_version``, ``producer`` and ``header`` are empty strings (no
    JLD2 header).
    """

    format_version = ""

    def __init__(
        self,
        source: str | os.PathLike[str] | bytes,
        *,
        limits: Limits = DEFAULT_LIMITS,
        verify_checksums: bool = False,
    ) -> None:
        h5py = _h5py()
        self.limits = limits
        # libhdf5 verifies metadata checksums whenever it reads them; nothing to switch on.
        self.verify_checksums = verify_checksums
        if isinstance(source, (bytes, bytearray, memoryview)):
            self.filename = "<bytes>"
            self.file_size = len(source)
            target: Any = io.BytesIO(bytes(source))
        else:
            self.filename = os.fspath(source)
            self.file_size = os.path.getsize(self.filename)
            target = self.filename
        try:
            self._h5 = h5py.File(target, "r")
        except OSError as err:
            raise WrongFormatError(f"{self.filename!r} is not an HDF5 file h5py can open ({err})") from err
        self.closed = False

    def _guard(self, f: Any) -> Any:
        """Run an h5py read: its errors become ours."""
        if self.closed:
            raise ValueError("I/O operation on a closed treexchange file")
        try:
            return f()
        except TreexchangeError:
            raise
        except (OSError, RuntimeError, TypeError, ValueError) as err:
            raise FormatError(f"h5py could not read the file: {err}") from err
        except RecursionError as err:
            raise LimitError("structure nested too deeply for Python's stack") from err

    def _node(self, group: Any, key: str, parent: TreePath) -> PlainNode:
        if key.strip("/") in ("", "."):
            raise KeyError(key)
        try:
            obj = self._guard(lambda: group[key])
        except (KeyError, FormatError) as err:
            raise KeyError(key) from err
        return PlainNode(self, obj, (*parent, *key.strip("/").split("/")))

    def __getitem__(self, key: str) -> PlainNode:
        if not isinstance(key, str):
            raise KeyError(key)
        return self._node(self._h5, key, ())

    def __iter__(self) -> Iterator[str]:
        return iter(self._h5)

    def __len__(self) -> int:
        return len(self._h5)

    @property
    def attrs(self) -> dict[str, Any]:
        """The root group's attributes, decoded like dataset values (strings as ``str``)."""
        reading = _Reading(self._h5, self.limits, "julia")

        def decode() -> dict[str, Any]:
            out: dict[str, Any] = {}
            for name in self._h5.attrs:
                value = self._h5.attrs[name]
                dtype = value.dtype if isinstance(value, (np.ndarray, np.generic)) else np.dtype(object)
                out[name] = reading.value(value, dtype, (name,))
            return out

        return self._guard(decode)

    def children(self) -> Iterator[tuple[str, PlainNode]]:
        if self.closed:  # (h5py's closed file iterates into a KeyError)
            raise ValueError("I/O operation on a closed treexchange file")
        for k in self._h5:
            yield k, self[k]

    def leaves(self) -> Iterator[tuple[TreePath, Any]]:
        """``(path, node)`` of every dataset's leaves, in the file's order (:func:`walk_leaves`)."""
        return walk_leaves(self, self.limits.nodes_for(self.file_size))

    def read(self, name: str | None = None, *, order: str = "julia", mmap: bool = True) -> Any:
        """Everything (``dict`` of top-level names) or one name, read through h5py into memory of
        its own (``mmap`` changes nothing)."""
        if name is not None:
            return self[name].read(order=order)
        reading = _Reading(self._h5, self.limits, order)
        return self._guard(lambda: {k: reading.obj(self._h5[k], (k,)) for k in self._h5})

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._h5.close()

    def __repr__(self) -> str:
        return f"<treexchange PlainFile {self.filename!r} (plain HDF5, {len(self)} names)>"
