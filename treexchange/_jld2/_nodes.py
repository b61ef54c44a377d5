"""Lazy nodes: a JLD2 file's values as a tree that is read only where it is looked at.

Every node has ``path`` (segments as in ``inspect --json``: names and 1-based positions),
``kind`` (``namedtuple``, ``tuple``, ``vector``, ``dict``, ``struct``, ``array``, ``number``,
``bool``, ``string``, ``symbol``, ``singleton``), ``julia_type`` and ``read()``. Building a node
parses at most the object header of the dataset it stands for; array data is read by
``read()``, slicing, or ``numpy.asarray``. Children are created on first access
(and kept, except array nodes: see ``ContainerNode``).

Indexing follows the Python value a node reads as: NamedTuple/struct fields and dict entries by
key, tuple and vector elements by 0-based position (like the ``tuple``/``list`` that ``read()``
returns), numeric arrays like the numpy array in Julia's shape.

Implementation note: a node keeps *data* describing where its value lives (a dataset address, or
a plan plus the bytes and offset of an inline element) and builds children from it on demand, with
no per-child closures. A walk over a 20,000-leaf model creates few objects that Python's cyclic
garbage collector has to track, which keeps full walks fast.
"""

from __future__ import annotations

import copy
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from .._errors import FormatError, LimitError, PathSegment, TreePath, UnsupportedError, format_path
from .._gc import gc_paused
from .._juliatype import JuliaType
from .._nodeproto import LeafRun, child_items, is_container, scalar_dtype, scalar_shape, walk_leaves
from .._typeof import BOTTOM, julia_type_of
from .._values import UNDEF, NamedTuple
from ._bulktext import vlen_texts
from ._plans import (
    CompoundPlan,
    CustomPlan,
    DataTypePlan,
    GhostPlan,
    Plan,
    ReferencePlan,
    UnionElementPlan,
    UnionTypePlan,
    VlenSequencePlan,
    VlenStringPlan,
    type_value,
)
from ._reader import _GROUP_MASK, _OFFSET_SHIFT, DatasetInfo, Order, Reader, Session
from ._typeutil import (
    is_namedtuple_type,
    is_tuple_type,
    namedtuple_names_types,
    tuple_element_types,
)


def array_protocol(arr: np.ndarray, dtype: Any, copy: bool | None) -> np.ndarray:
    """``__array__`` for nodes: ``arr`` itself (a view) unless a copy is asked for or needed.

    Follows numpy's protocol: ``copy=True`` always copies, ``copy=False`` refuses to copy
    (ValueError), ``None`` copies only to convert ``dtype``.

    Example:
        >>> a = np.zeros(3, np.float32)
        >>> array_protocol(a, None, None) is a, np.shares_memory(array_protocol(a, None, True), a)
        (True, False)
        >>> array_protocol(a, np.float64, None).dtype
        dtype('float64')
    """
    if dtype is not None and np.dtype(dtype) != arr.dtype:
        if copy is False:
            raise ValueError(f"converting {arr.dtype} to {np.dtype(dtype)} needs a copy (copy=False)")
        return arr.astype(dtype)
    return arr.copy(order="K") if copy else arr


class Node:
    """A value in an open JLD2 file (see the module docstring).

    ``path`` (and hence ``repr(node)`` and error messages) counts positions from 1 as Julia and
    ``inspect`` do, while indexing a node counts from 0 as the Python value does: the node
    ``f["model_state"]["layers"][0]`` has the path ``model_state.layers[1]``.

    Attributes:
        path: tree path (first segment = top-level name; 1-based ints for positions).
        kind: the inspect kind.
        julia_type: the Julia type of the value.
    """

    __slots__ = ("_reader", "julia_type", "kind", "path")

    def __init__(self, reader: Reader, path: TreePath, kind: str, julia_type: JuliaType) -> None:
        self._reader = reader
        self.path = path
        self.kind = kind
        self.julia_type = julia_type

    # --- reading ----------------------------------------------------------------------------
    def read(self, *, order: Order = "julia", mmap: bool = True) -> Any:
        """The whole value (arrays as numpy views of the file when stored uncompressed).

        ``mmap=False``: every numeric array is read into an array of its own with a plain
        read (see :func:`treexchange.load`).
        """
        return self._read(Session(self._reader, order, mmap=mmap))

    def _read(self, session: Session) -> Any:
        raise NotImplementedError

    @property
    def object_address(self) -> int | None:
        """The address of the HDF5 object (dataset) that holds this value, or ``None`` for a
        value stored inline in another object. Two nodes with one address are one Julia object
        (shared, or a reference cycle): a walk that visits each object once keys on this."""
        src = getattr(self, "_src", None)
        if type(src) is int:
            return src
        if isinstance(src, _Source):
            return src.address
        return None

    # --- array access (arrays and vectors override) -------------------------------------------
    @property
    def shape(self) -> tuple[int, ...] | None:
        """Julia's shape of an array or vector; ``None`` for other values."""
        return None

    @property
    def dtype(self) -> np.dtype | None:
        """The numpy element type of a numeric array; ``None`` for other values."""
        return None

    # --- children (containers override) -------------------------------------------------------
    def children(self) -> Iterator[tuple[PathSegment, Node | Group]]:
        """Child nodes in order with their path segments (none for leaves and arrays)."""
        return iter(())

    def leaves(self) -> Iterator[tuple[TreePath, Node | Group]]:
        """``(path, node)`` of every leaf at or below this node, in order: arrays, numbers,
        strings, ... (every node that is not a container), each container object visited once
        (see :meth:`treexchange.Group.leaves`). A leaf's own leaves: itself.

        Example:
            >>> import os, tempfile, numpy as np
            >>> import treexchange
            >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
            >>> treexchange.save(path, st=treexchange.NamedTuple(w=np.zeros(3), opt=(0.9, "adam")))
            >>> with treexchange.open(path) as f:
            ...     [(p, leaf.kind) for p, leaf in f["st"]["opt"].leaves()]
            [(('st', 'opt', 1), 'number'), (('st', 'opt', 2), 'string')]
        """
        return _leaves(self)

    def __getitem__(self, key: Any) -> Any:
        raise TypeError(f"a {self.kind} node has no children")

    def __len__(self) -> int:
        raise TypeError(f"a {self.kind} node has no length")

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(f"a {self.kind} node is not iterable")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {format_path(self.path)}: {self.kind} {self.julia_type}>"


class _Source:
    """Where a node's value lives: a dataset (read through the session's identity memo), an
    inline element (plan + bytes + offset), or a value already known (ghosts, constants)."""

    __slots__ = ("address", "buf", "off", "plan", "value")

    def __init__(
        self,
        *,
        address: int | None = None,
        plan: Plan | None = None,
        buf: Any = None,
        off: int = 0,
        value: Any = None,
    ) -> None:
        self.address = address
        self.plan = plan
        self.buf = buf
        self.off = off
        self.value = value

    def read(self, session: Session, path: TreePath) -> Any:
        if self.address is not None:
            return session.load_ref(self.address, path)
        if self.plan is not None:
            return self.plan.decode(session, self.buf, self.off, path)
        return self.value


Where = _Source | int
"""A node's source: a :class:`_Source`, or just the address of the dataset that holds the value.

Most containers of a large model are datasets of their own (each layer of a Flux state is one):
an ``int`` costs no allocation and is not tracked by the cyclic garbage collector, where a
``_Source`` per node would be one more object for every full collection to scan.
"""


def _read_from(src: Where, session: Session, path: TreePath) -> Any:
    if type(src) is int:
        return session.load_ref(src, path)
    assert isinstance(src, _Source)
    return src.read(session, path)


class LeafNode(Node):
    """A number, Bool, String, Symbol or singleton; ``read()`` decodes it."""

    __slots__ = ("_src",)

    def __init__(self, reader: Reader, path: TreePath, kind: str, julia_type: JuliaType, src: Where) -> None:
        super().__init__(reader, path, kind, julia_type)
        self._src = src

    @property
    def shape(self) -> tuple[int, ...] | None:
        """``()`` for a number or a Bool (a numpy scalar's shape), ``None`` for the others."""
        return scalar_shape(self.kind)

    @property
    def dtype(self) -> np.dtype | None:
        """The numpy dtype of a number's or a Bool's Julia type (``None`` when numpy has none,
        and for strings, Symbols and singletons): :func:`treexchange._nodeproto.scalar_dtype`."""
        return scalar_dtype(self.kind, self.julia_type)

    def _read(self, session: Session) -> Any:
        return _read_from(self._src, session, self.path)


def _const(reader: Reader, path: TreePath, kind: str, julia_type: JuliaType, value: Any) -> LeafNode:
    return LeafNode(reader, path, kind, julia_type, _Source(value=value))


_SHARED_CONSTANTS = 4096


def _shared_const(reader: Reader, path: TreePath, kind: str, julia_type: JuliaType, value: Any) -> LeafNode:
    """:func:`_const` for immutable values that recur at many nodes (ghosts such as ``σ = ()``
    in every layer, undefined references): one ``_Source`` per value and file, not per node.
    Keyed by identity (the entry keeps the value alive, so its id is not reused)."""
    sources = reader.node_sources
    hit = sources.get(id(value))
    if hit is None or hit.value is not value:
        hit = _Source(value=value)
        if len(sources) < _SHARED_CONSTANTS:
            sources[id(value)] = hit
    return LeafNode(reader, path, kind, julia_type, hit)


class ArrayNode(Node):
    """A numeric (numbers, Bool, Complex, BFloat16) array; no data is read until asked.

    ``shape`` is Julia's (``W[i, j]`` is ``node[i-1, j-1]``); slicing returns numpy arrays and
    reads only the needed part of the memory map. ``numpy.asarray(node)`` reads it all.

    Uncompressed arrays are views of the open file's copy-on-write memory map, and every read
    from one open File views the same map: writing into ``np.asarray(node)`` (or into what
    ``read()`` returned) never reaches the disk, but does change what later reads of the same
    open File return. ``np.array(node)`` (``copy=True``) gives an independent copy.
    """

    # ``shape`` and ``dtype`` are stored on the node (slots): a walk asks both of every array,
    # and a slot is read in C without the two lookups a property over the description costs
    # (the description is the dataset's own header, or one alike to it: Reader.describe; no
    # header object is kept per array, the header itself is made when the data are read).
    # ``_address`` is the dataset's; an array held in memory (a decoded vlen sequence) has
    # ``_address`` None and its value in ``_value`` (read only then: a node of a dataset may
    # leave it unset).
    # The path is kept as CompoundNode keeps it (``_up``, and ``_seg`` or None; ``path`` builds
    # it when asked, once): a walk asks every leaf's shape and dtype, rarely its path, and a
    # path tuple per leaf was a fifth of what a Dict's lookup of a leaf allocated.
    # ``_up`` is the parent's path, or (a layer's field) the layer's node itself, whose path is
    # then not built per leaf either.
    __slots__ = ("_address", "_seg", "_up", "_value", "dtype", "shape")
    shape: tuple[int, ...]  # type: ignore[assignment]  # (a slot here: always set)
    dtype: np.dtype  # type: ignore[assignment]
    _value: np.ndarray | None
    _address: int | None
    _up: TreePath | CompoundNode
    _seg: PathSegment | None

    # Made as ``ArrayNode()``, its slots then set (:func:`array_node`, or inline on a walk's hot
    # paths): with object's own ``__init__`` that call is the cheapest way Python makes an
    # instance (no ``object.__new__`` wrapper checks, no Python frame), and a walk makes a node
    # per array it looks at.
    __init__ = object.__init__  # type: ignore[assignment]

    # Every array node's kind, on the class: one store fewer per node made (a walk makes one per
    # leaf). It hides Node's ``kind`` slot, which an array node never sets (nor can: the class
    # attribute is read-only on a slotted instance), hence __copy__ below.
    kind = "array"

    def __copy__(self) -> ArrayNode:
        """A node alike (``copy.copy``'s default would set every slot named by the classes,
        ``kind`` too, which an array node refuses)."""
        clone = ArrayNode()
        clone._reader, clone._up, clone._seg = self._reader, self.path, None
        clone.julia_type = self.julia_type
        clone.shape, clone.dtype, clone._address = self.shape, self.dtype, self._address
        if self._address is None:
            clone._value = self._value
        return clone

    @property  # type: ignore[override]
    def path(self) -> TreePath:
        seg = self._seg
        up = self._up
        if seg is None:
            return up  # type: ignore[return-value]  # (a tuple: see __slots__)
        if not isinstance(up, tuple):
            up = up.path  # a layer's field: its parent is the layer's node
        path = self._up = up + (seg,)  # noqa: RUF005 (faster than starred)
        self._seg = None  # (built once)
        return path

    @path.setter
    def path(self, path: TreePath) -> None:
        self._up, self._seg = path, None

    @property
    def _info(self) -> DatasetInfo | None:
        """The dataset's own (described) header, or None for an array held in memory."""
        if self._address is None:
            return None
        return self._reader.info(self._address, self.path)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def object_address(self) -> int | None:
        return self._address

    def _array(self, order: Order) -> np.ndarray:
        info = self._info
        if info is not None:
            return self._reader.numeric_array(info, order)
        value = self._value
        assert value is not None
        return value if order == "julia" else value.T

    def _read(self, session: Session) -> Any:
        if self._address is not None:
            return session.load_ref(self._address, self.path)
        return self._array(session.order)

    def __getitem__(self, index: Any) -> Any:
        return self._array("julia")[index]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return array_protocol(self._array("julia"), dtype, copy)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-dimensional array")
        return self.shape[0]


def array_node(
    reader: Reader,
    path: TreePath,
    info: DatasetInfo | None,
    value: np.ndarray | None = None,
    address: int | None = None,
) -> ArrayNode:
    """The :class:`ArrayNode` of a described numeric array dataset (``info``: its header, or one
    alike to it, then with the dataset's ``address``), or of ``value`` held in memory (``info``
    None)."""
    node = ArrayNode()
    node._reader, node._up, node._seg = reader, path, None
    if info is None:
        assert value is not None
        node.julia_type = JuliaType("Core.Array")
        node.shape, node.dtype, node._value, node._address = tuple(value.shape), value.dtype, value, None
    else:
        assert info.shape is not None and info.dtype is not None  # (only such are array nodes)
        node.julia_type, node.shape, node.dtype, node._value = info.julia_type, info.shape, info.dtype, None
        node._address = info.address if address is None else address
    return node


class ContainerNode(Node):
    """A NamedTuple, Tuple, vector (list / JuliaArray), Dict or struct.

    Subclasses describe their entries as ``(segment, key)`` pairs: the inspect path segment and
    the Python key (field name, dict key, or 0-based position), and build child ``i`` on demand.
    """

    # Children are made once and kept in ``_cache`` -- except arrays, made again each time they
    # are asked for (a few attribute stores): a walk over 100,000 arrays then leaves no 100,000
    # nodes (and paths) alive for the cyclic garbage collector to scan at each collection (a
    # third of such a walk's time). An array node holds no data, only where its data lie.
    # A struct made in bulk (a layer: RefVectorNode._make_block) starts with the one shared
    # empty ``_NONE_KEPT`` and gets a dict of its own when it keeps a first child (``_keep``):
    # the layers of a model keep none (their fields are arrays), and a dict per layer would be
    # one more object per layer to allocate and to count toward the collector's next pass.
    __slots__ = ("_cache", "_index", "_keys", "_shape", "_src")

    def __init__(
        self,
        reader: Reader,
        path: TreePath,
        kind: str,
        julia_type: JuliaType,
        src: Where,
        shape: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(reader, path, kind, julia_type)
        self._src = src
        self._keys: Sequence[tuple[PathSegment, Any]] | None = None
        self._cache: dict[int, Node | Group] = {}
        self._index: dict[Any, int] | None = None  # key -> position, built on the first lookup
        self._shape = shape

    @property
    def shape(self) -> tuple[int, ...] | None:
        """Julia's shape of a vector stored as an array (``None`` for other containers)."""
        return self._shape

    # subclass interface (the entries are never modified: subclasses may share them)
    def _entries(self) -> Sequence[tuple[PathSegment, Any]]:
        raise NotImplementedError

    def _make(self, i: int, path: TreePath) -> Node | Group:
        raise NotImplementedError

    # shared behaviour
    def _all(self) -> Sequence[tuple[PathSegment, Any]]:
        if self._keys is None:
            self._keys = self._entries()
        return self._keys

    def _child(self, i: int) -> Node | Group:
        node = self._cache.get(i)
        if node is None:
            node = self._make(i, (*self.path, self._all()[i][0]))
            if type(node) is not ArrayNode:  # see __slots__
                self._keep(i, node)
        return node

    def _keep(self, i: int, node: Node | Group) -> None:
        """Keep child ``i`` (made once: see ``__slots__``), in a dict of this node's own."""
        cache = self._cache
        if cache is _NONE_KEPT:
            cache = self._cache = {}
        cache[i] = node

    def keys(self) -> list[Any]:
        """Field names / dict keys (for tuples and vectors: 0-based positions)."""
        entries = self._all()
        if type(entries) is _SameEntries or type(entries) is _PositionEntries:
            return entries.key_list()
        return [key for _, key in entries]

    def children(self) -> Iterator[tuple[PathSegment, Node | Group]]:
        path = self.path
        for i, (seg, _) in enumerate(self._all()):
            node = self._cache.get(i)  # what _child does, inlined: this runs for every node of a walk
            if node is None:
                node = self._make(i, (*path, seg))
                if type(node) is not ArrayNode:
                    self._keep(i, node)
            yield seg, node

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[Any]:
        if self.kind in ("tuple", "vector"):
            return (self._child(i) for i in range(len(self)))
        return iter(self.keys())

    def __getitem__(self, key: Any) -> Any:
        entries = self._all()
        if type(key) is int and self.kind in ("tuple", "vector"):  # the common case, first
            i = key + len(entries) if key < 0 else key
            if 0 <= i < len(entries):
                node = self._cache.get(i)
                return node if node is not None else self._child(i)
        if self.kind in ("tuple", "vector") and not isinstance(key, str):
            if isinstance(key, tuple) and self.shape is not None and len(key) == len(self.shape):
                key = _linear_index(key, self.shape)
            if isinstance(key, slice):
                return [self._child(i) for i in range(len(entries))[key]]
            if isinstance(key, (int, np.integer)):
                i = int(key)
                if i < 0:
                    i += len(entries)
                if not 0 <= i < len(entries):
                    raise IndexError(f"index {key} out of range for {len(entries)} elements")
                return self._child(i)
            raise TypeError(f"{self.kind} indices must be integers, not {type(key).__name__}")
        position = self._position(key)
        if position is None:
            raise KeyError(key)
        return self._child(position)

    def __contains__(self, key: Any) -> bool:
        if self.kind in ("tuple", "vector"):
            return any(k == key for _, k in self._all())
        return self._position(key) is not None

    def _position(self, key: Any) -> int | None:
        """The position of ``key`` among the entries: the first with the same type and an equal
        value, else the first equal one (a Python ``int`` for an ``Int64`` key). Large entry
        lists are looked up through a dict built once, so walking a Dict by keys is linear."""
        entries = self._all()
        if len(entries) > _INDEXED_ENTRIES:
            index = self._index
            if index is None:
                index = self._index = _key_index(entries)
            # Every key indexed and no two equal: a hit is the only entry equal to ``key``.
            complete = len(index) == len(entries)
            try:
                i = index.get(key)
            except TypeError:  # an unhashable key: no hashable entry is it (as in a dict)
                if complete:
                    return None
            else:
                if i is not None and (complete or type(entries[i][1]) is type(key)):
                    return i
                if i is None and complete:
                    return None
        for i, (_, k) in enumerate(entries):
            if type(k) is type(key) and k == key:
                return i
        for i, (_, k) in enumerate(entries):  # e.g. a Python int for an Int64 dict key
            if k == key:
                return i
        return None

    def _read(self, session: Session) -> Any:
        return _read_from(self._src, session, self.path)


class _SameEntries(Sequence[tuple[PathSegment, Any]]):
    """Entries whose path segment is the key itself (a Dict's String keys): held as the one
    list of keys, each ``(key, key)`` pair made when asked for. A Dict of 100,000 entries then
    leaves one list for the cyclic garbage collector to scan, not 100,000 tuples."""

    __slots__ = ("_list",)

    def __init__(self, keys: list[Any]) -> None:
        self._list = keys

    def __len__(self) -> int:
        return len(self._list)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [(k, k) for k in self._list[i]]
        k = self._list[i]
        return (k, k)

    def __iter__(self) -> Iterator[tuple[PathSegment, Any]]:
        return zip(self._list, self._list)

    def key_list(self) -> list[Any]:
        return list(self._list)


class _PositionEntries(Sequence[tuple[PathSegment, Any]]):
    """The entries of a vector or tuple of ``n`` elements: segment ``i + 1`` (1-based, as
    paths count), key ``i``; made when asked for, like :class:`_SameEntries`."""

    __slots__ = ("_n",)

    def __init__(self, n: int) -> None:
        self._n = n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [(j + 1, j) for j in range(self._n)[i]]
        j = range(self._n)[i]  # (negative positions and IndexError as for a list)
        return (j + 1, j)

    def __iter__(self) -> Iterator[tuple[PathSegment, Any]]:
        return zip(range(1, self._n + 1), range(self._n))

    def key_list(self) -> list[Any]:
        return list(range(self._n))


_INDEXED_ENTRIES = 16
"""Containers with more entries than this get a key -> position dict on their first lookup."""


def _key_index(entries: Sequence[tuple[PathSegment, Any]]) -> dict[Any, int]:
    """Key -> first position, for the hashable keys (unhashable ones are left out, so a miss
    is only conclusive when every key is in the index)."""
    index: dict[Any, int] = {}
    for i, (_, k) in enumerate(entries):
        try:
            index.setdefault(k, i)
        except TypeError:
            pass
    return index


def _linear_index(index: tuple[Any, ...], shape: tuple[int, ...]) -> int:
    lin, stride = 0, 1
    for i, n in zip(index, shape):
        i = int(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {index} out of range for shape {shape}")
        lin += i * stride
        stride *= n
    return lin


class CompoundNode(ContainerNode):
    """A NamedTuple / Tuple / struct stored as a compound element: children are its fields."""

    # The path is kept as the parent's path ``_up`` and the node's own segment ``_seg`` (None:
    # ``_up`` is the whole path): a layer made in bulk (RefVectorNode._make_block) then allocates
    # no path tuple of its own. A model's layers stay alive while it is walked (kept by their
    # vector), and a tuple per layer was half of what they counted toward the collector's next
    # young pass (a walk of 500 layers ran two, now one). ``path`` builds it when asked.
    __slots__ = ("_buf", "_off", "_plan", "_seg", "_up")
    _plan: CompoundPlan
    _buf: Any
    _off: int
    _up: TreePath
    _seg: PathSegment | None

    # Made as ``CompoundNode()``, its slots then set (:func:`_compound_node`, and a block of a
    # vector's layers at once in RefVectorNode._make_block): as for ArrayNode, object's own
    # ``__init__`` makes that the cheapest way to make the node of each layer of a model.
    __init__ = object.__init__  # type: ignore[assignment]

    @property  # type: ignore[override]
    def path(self) -> TreePath:
        seg = self._seg
        return self._up if seg is None else self._up + (seg,)  # noqa: RUF005 (faster than starred)

    @path.setter
    def path(self, path: TreePath) -> None:
        self._up, self._seg = path, None

    def _entries(self) -> Sequence[tuple[PathSegment, Any]]:
        return self._plan.entries  # made once per type, shared by all its nodes

    def keys(self) -> list[Any]:
        """Field names (for a Tuple: 0-based positions)."""
        return list(self._plan.keys)

    def __getitem__(self, key: Any) -> Any:
        if type(key) is str:  # a field by name: its position is known per type
            at = self._plan.ref_at.get(key)
            if at is not None:
                # a layer's weight: what _make makes of a described array, inline (a walk's hot
                # path; a described array is never cached, so the cache is not asked)
                reader = self._reader
                address = _unpack_u64(self._buf, self._off + at)[0]
                # Vouched for first: a walk's leaves are (an address is in one of the two:
                # HDF5File.object pops what it parses). (DatasetInfo: the file's header_type; no
                # typing.cast, a call, on this path.)
                info: DatasetInfo | None = reader.h5._vouched.get(address)  # type: ignore[assignment]
                if info is None:
                    info = reader.h5._objects.get(address)  # type: ignore[assignment]
                    if info is None:  # (or in a group vouched for later: HDF5File.vouch_as)
                        info = reader.h5.vouched_for(address)  # type: ignore[assignment]
                if (
                    info is not None
                    and info.value_kind is not None
                    and (dtype := info.dtype) is not None
                    and not reader.closed
                ):
                    # the leaf's path: this node's and the key, built when asked (ArrayNode.path;
                    # neither this layer's path nor the leaf's is built per leaf, and a tuple per
                    # layer kept alive would count toward the collector's next young pass)
                    if len(self._up) + (self._seg is not None) < reader.max_path:  # (else raises)
                        leaf = ArrayNode()
                        leaf._reader = reader  # (one store a statement: cheaper than tuple assignments)
                        leaf._up = self
                        leaf._seg = key
                        leaf.julia_type = info.julia_type
                        leaf.shape = info.shape  # type: ignore[assignment]  # (an array's: a tuple)
                        leaf.dtype = dtype
                        leaf._address = address
                        return leaf
            i = self._plan.positions.get(key)
            if i is not None:
                node = self._cache.get(i)
                if node is None:
                    node = self._make(i, (*self.path, key))
                    if type(node) is not ArrayNode:
                        self._keep(i, node)
                return node
        return super().__getitem__(key)

    def _make(self, i: int, path: TreePath) -> Node | Group:
        f = self._plan.fields[i]
        reader = self._reader
        if type(f.plan) is ReferencePlan and len(path) <= reader.max_path:
            address = _U64.unpack_from(self._buf, self._off + f.offset)[0]
            return node_for_ref(reader, path, address)
        return node_for_inline(reader, path, f.plan, self._buf, self._off + f.offset)


def _compound_node(
    reader: Reader, path: TreePath, plan: CompoundPlan, buf: Any, off: int, src: Where
) -> Node:
    """The :class:`CompoundNode` of the element of ``plan`` at ``buf[off:]`` (read through
    ``src``), its slots set at once."""
    node = CompoundNode()
    node._reader, node._up, node._seg = reader, path, None
    node.kind, node.julia_type = plan.kind, plan.julia_type
    node._src, node._keys, node._cache, node._index, node._shape = src, None, _NONE_KEPT, None, None
    node._plan, node._buf, node._off = plan, buf, off
    return node


class _NoneKept(dict):  # type: ignore[type-arg]
    """The ``_cache`` of nodes that keep no child yet (see ``ContainerNode.__slots__``): one
    empty dict shared by them, which refuses to be written (``ContainerNode._keep`` gives a
    node a dict of its own first), so no write can reach another node's children."""

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a node's shared empty cache is never written (see ContainerNode._keep)")

    __setitem__ = __delitem__ = setdefault = update = pop = popitem = clear = __ior__ = _refuse  # type: ignore[assignment]


_NONE_KEPT: dict[int, Any] = _NoneKept()


class RefVectorNode(ContainerNode):
    """A dataset of references (``Vector{Any}``, ``Vector{Matrix{Float32}}``, ...)."""

    __slots__ = ("_addresses", "_info", "_primed", "_to_prime")

    def __init__(self, reader: Reader, path: TreePath, info: DatasetInfo) -> None:
        super().__init__(reader, path, "vector", info.julia_type, info.address, info.shape)
        self._info = info
        self._addresses: list[int] | None = None
        self._to_prime: np.ndarray | None = None  # the addresses as read, until prime reads them
        self._primed = False

    def _entries(self) -> Sequence[tuple[PathSegment, Any]]:
        found = self._reader.element_addresses(self._info)
        self._addresses, self._to_prime = found.tolist(), found  # (Python ints: looked up per child)
        return _PositionEntries(len(self._addresses))

    def _child(self, i: int) -> Node | Group:
        node = self._cache.get(i)
        if node is not None:
            return node
        addresses = self._addresses
        if addresses is None or not self._primed:
            addresses = self._prime()
        if addresses[i] in self._reader._elements:  # read by prime: maybe a struct (see _make_block)
            node = self._make_block(i, addresses)
            if node is not None:
                return node
            node = self._make(i, (*self.path, i + 1))
        else:  # what _make makes of an element prime did not read (an array, mostly), at once
            node = node_for_ref(self._reader, (*self.path, i + 1), addresses[i])
        if type(node) is not ArrayNode:
            self._keep(i, node)
        return node

    def _make_block(self, i: int, addresses: list[int]) -> Node | Group | None:
        """Child ``i`` when its element was primed as a struct (a layer of a model), made with
        the other such children of its block of ``_BLOCK`` elements, all at once: what
        :meth:`_make` makes of each, without its calls (a walk asks for every element; in one
        loop a node costs a few attribute stores). None when child ``i`` is not such."""
        reader = self._reader
        if reader.closed or len(self.path) >= reader.max_path:
            return None
        elements, groups, objects = reader._elements, reader._element_groups, reader.h5._objects
        found = elements.get(addresses[i])
        if (
            found is None
            or addresses[i] in objects
            or type(groups[found & _GROUP_MASK][0].plan) is not CompoundPlan
        ):
            return None  # (first: an element that is not such never costs a loop over its block)
        cache, path = self._cache, self.path
        lo = i - i % _BLOCK
        block = addresses[lo : lo + _BLOCK]
        parsed = not objects.keys().isdisjoint(block)  # (usually none is: then no lookup each)
        group, blob, kind, jt = -1, b"", "", BOTTOM
        plan: CompoundPlan | None = None  # (of the group: kind and type read once per group)
        for j, address in enumerate(block, lo):
            found = elements.get(address)
            if found is None or j in cache or (parsed and address in objects):
                continue  # (Reader.primed_struct's conditions)
            if found & _GROUP_MASK != group:  # (the elements of a vector: usually one group)
                group = found & _GROUP_MASK
                info, blob = groups[group]
                plan = info.plan if type(info.plan) is CompoundPlan else None
                if plan is not None:
                    kind, jt = plan.kind, plan.julia_type
            if plan is None:
                continue
            # one store a statement: cheaper than tuple assignments
            node = CompoundNode()
            node._reader = reader
            node._up = path  # (its path: path + (j + 1,), built when asked; see CompoundNode)
            node._seg = j + 1
            node.kind = kind
            node.julia_type = jt
            node._src = address
            node._keys = None
            node._cache = _NONE_KEPT
            node._index = None
            node._shape = None
            node._plan = plan
            node._buf = blob
            node._off = found >> _OFFSET_SHIFT
            cache[j] = node
        return cache.get(i)

    def _prime(self) -> list[int]:
        """The element addresses; on the first child looked at, every element's header is
        checked at once (and the small struct elements read: Reader.prime)."""
        addresses = self._addresses
        if addresses is None:
            self._all()
            addresses = self._addresses
        assert addresses is not None
        if not self._primed:
            found, self._to_prime = self._to_prime, None
            if len(addresses) >= _BULK_MIN:
                self._reader.prime(np.array(addresses, np.uint64) if found is None else found, self.path)
            self._primed = True
        return addresses

    def _make(self, i: int, path: TreePath) -> Node | Group:
        addresses = self._prime()
        reader = self._reader
        address = addresses[i]
        primed = reader.primed_struct(address)
        if primed is not None and len(path) <= reader.max_path:
            # a struct / NamedTuple read in bulk: what node_for_dataset makes of it, at once
            plan, buf, off = primed
            return _compound_node(reader, path, plan, buf, off, address)
        return node_for_ref(reader, path, address)


class InlineVectorNode(ContainerNode):
    """A dataset of inline non-plain elements (Symbols, Strings, structs, unions, ghosts)."""

    __slots__ = ("_info", "_raw")

    def __init__(self, reader: Reader, path: TreePath, info: DatasetInfo) -> None:
        super().__init__(reader, path, "vector", info.julia_type, info.address, info.shape)
        self._info = info
        self._raw: Any = None

    def _entries(self) -> Sequence[tuple[PathSegment, Any]]:
        info, plan = self._info, self._info.plan
        assert plan is not None
        n = info.count
        if not (info.space == "null" or isinstance(plan, GhostPlan)):
            self._raw = self._reader.raw(info, n * plan.size)
        return _PositionEntries(n)

    def _make(self, i: int, path: TreePath) -> Node | Group:
        self._all()
        plan = self._info.plan
        assert plan is not None
        if self._raw is None:
            return node_for_inline(self._reader, path, plan, b"", 0)
        return node_for_inline(self._reader, path, plan, self._raw, i * plan.size)


class ValueVectorNode(ContainerNode):
    """Elements already decoded (an NTuple stored as a numeric vector, a vlen sequence)."""

    __slots__ = ("_item_kind", "_item_type", "_items")

    def __init__(
        self,
        reader: Reader,
        path: TreePath,
        kind: str,
        julia_type: JuliaType,
        src: Where,
        items: list[Any],
        item_kind: str,
        item_type: JuliaType,
    ) -> None:
        super().__init__(reader, path, kind, julia_type, src, (len(items),))
        self._items, self._item_kind, self._item_type = items, item_kind, item_type

    def _entries(self) -> Sequence[tuple[PathSegment, Any]]:
        return _PositionEntries(len(self._items))

    def _make(self, i: int, path: TreePath) -> Node | Group:
        return _const(self._reader, path, self._item_kind, self._item_type, self._items[i])


class GhostContainerNode(ContainerNode):
    """A Tuple or NamedTuple of zero-size values: children are ghosts too."""

    __slots__ = ("_types", "_value")

    def __init__(self, reader: Reader, path: TreePath, kind: str, jt: JuliaType, value: Any) -> None:
        super().__init__(reader, path, kind, jt, _Source(value=value))
        self._value = value
        self._types: list[Any] | None = None

    def _entries(self) -> Sequence[tuple[PathSegment, Any]]:
        value, jt, limits = self._value, self.julia_type, self._reader.type_limits
        if isinstance(value, NamedTuple):
            parsed = namedtuple_names_types(jt, limits) if is_namedtuple_type(jt) else None
            types = dict(zip(*parsed)) if parsed is not None else {}
            self._types = [types.get(k) for k in value]
            return [(k, k) for k in value]
        elems = tuple_element_types(jt, limits) if is_tuple_type(jt) else []
        self._types = [elems[i] if i < len(elems) else None for i in range(len(value))]
        return [(i + 1, i) for i in range(len(value))]

    def _make(self, i: int, path: TreePath) -> Node | Group:
        self._all()
        assert self._types is not None
        value = self._value
        item = list(value.values())[i] if isinstance(value, NamedTuple) else value[i]
        jt = self._types[i]
        if not isinstance(jt, JuliaType):
            jt = julia_type_of(item, path=path)
        return ghost_node(self._reader, path, item, jt)


class DelegateNode(ContainerNode):
    """A custom-serialized Tuple or struct: the children of its written form (same paths)."""

    __slots__ = ("_target",)

    def __init__(
        self, reader: Reader, path: TreePath, kind: str, jt: JuliaType, target: ContainerNode, src: Where
    ):
        super().__init__(reader, path, kind, jt, src, target.shape)
        self._target = target

    def _entries(self) -> Sequence[tuple[PathSegment, Any]]:
        return self._target._all()

    def _make(self, i: int, path: TreePath) -> Node | Group:
        return self._target._child(i)

    def _child(self, i: int) -> Node | Group:
        return self._target._child(i)  # its node, at the same path: one cache for both

    def __getitem__(self, key: Any) -> Any:
        if type(key) is int and 0 <= key and self.kind in ("tuple", "vector"):  # the walk's case
            target = self._target
            node = target._cache.get(key)  # (holds only positions in range)
            if node is not None:
                return node
            if key < len(target._all()):
                return target._child(key)
        return super().__getitem__(key)


class FixedNode(ContainerNode):
    """Children known up front: ``(segment, key, node)`` (Dicts, a struct holding ``kvvec``)."""

    __slots__ = ("_nodes",)

    def __init__(
        self,
        reader: Reader,
        path: TreePath,
        kind: str,
        jt: JuliaType,
        src: Where,
        children: list[tuple[PathSegment, Any, Node | Group]],
    ) -> None:
        super().__init__(reader, path, kind, jt, src)
        self._nodes = children

    def _entries(self) -> Sequence[tuple[PathSegment, Any]]:
        return [(seg, key) for seg, key, _ in self._nodes]

    def _make(self, i: int, path: TreePath) -> Node | Group:
        return _reparent(self._nodes[i][2], path)


class RepathedNode(ContainerNode):
    """A container seen through another path (a Dict value): same children, new paths."""

    __slots__ = ("_inner",)

    def __init__(self, inner: ContainerNode, path: TreePath) -> None:
        super().__init__(inner._reader, path, inner.kind, inner.julia_type, inner._src, inner.shape)
        self._inner = inner

    def _entries(self) -> Sequence[tuple[PathSegment, Any]]:
        return self._inner._all()

    def _make(self, i: int, path: TreePath) -> Node | Group:
        return _reparent(self._inner._child(i), path)


def _reparent(node: Node | Group, path: TreePath) -> Node | Group:
    if isinstance(node, Group) or node.path == path:
        return node
    if isinstance(node, ContainerNode):
        return RepathedNode(node, path)
    clone = copy.copy(node)
    clone.path = path
    return clone


class Group(Mapping[str, "Node | Group"]):
    """An HDF5 group of a JLD2 file (``f["a/b"] = x`` in Julia): a mapping of names to nodes.

    ``read()`` gives a ``dict`` (nested groups as nested dicts).
    """

    kind = "group"
    julia_type = JuliaType("JLD2.Group")
    shape: tuple[int, ...] | None = None  # (no array access: see treexchange._nodeproto)
    dtype: np.dtype | None = None

    def __init__(self, reader: Reader, path: TreePath, address: int) -> None:
        self._reader = reader
        self.path = path
        self._address = address
        self._links: dict[str, int] | None = None
        self._cache: dict[str, Node | Group] = {}

    @property
    def object_address(self) -> int:
        """The group's object header address (a hard link to an ancestor makes a cycle)."""
        return self._address

    def _all(self) -> dict[str, int]:
        if self._links is None:
            self._links = self._reader.links(self._address, hide_types=not self.path)
        return self._links

    def __getitem__(self, key: str) -> Node | Group:
        if not isinstance(key, str):
            raise KeyError(key)
        if key in self._all():
            return self._entry(key)
        stripped = key.strip("/")
        if stripped in self._all():
            return self._entry(stripped)
        if "/" in stripped:
            head, _, rest = stripped.partition("/")
            child = self[head]
            if not isinstance(child, Group):
                raise KeyError(key)
            return child[rest]
        raise KeyError(key)

    def _entry(self, name: str) -> Node | Group:
        """The node linked under exactly ``name`` (no ``a/b`` path walking)."""
        node = self._cache.get(name)
        if node is None:
            node = node_for_dataset(self._reader, (*self.path, name), self._all()[name])
            self._cache[name] = node
        return node

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def children(self) -> Iterator[tuple[PathSegment, Node | Group]]:
        for name in self._all():
            yield name, self._entry(name)

    def leaves(self) -> Iterator[tuple[TreePath, Node | Group]]:
        """``(path, node)`` of every leaf in the group, in order, and in the groups below it.

        A leaf is a node that is not a container: an array, a number, a string, a symbol, a
        singleton (``nothing``, a function, and ``()``: the marker ``Flux.state`` writes for a
        field without state, as ``inspect`` shows it). An array's shape and dtype come from
        its header, which this walk checks in bulk for many alike datasets; no array data are
        read. Each container object is visited once (a later place that holds the same object,
        shared or in a cycle, adds nothing; an array shared by two places is a leaf at both).

        Raises:
            LimitError: more nodes than the file's ``Limits.max_nodes`` allows.

        Example:
            >>> import os, tempfile, numpy as np
            >>> import treexchange
            >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
            >>> layer = treexchange.NamedTuple(weight=np.zeros((3, 2), np.float32), σ=())
            >>> treexchange.save(path, model=treexchange.NamedTuple(layers=(layer, layer)), step=7)
            >>> with treexchange.open(path) as f:
            ...     for p, leaf in f.leaves():
            ...         print(p, leaf.kind, leaf.shape, leaf.dtype)
            ('model', 'layers', 1, 'weight') array (3, 2) float32
            ('model', 'layers', 1, 'σ') singleton None None
            ('model', 'layers', 2, 'weight') array (3, 2) float32
            ('model', 'layers', 2, 'σ') singleton None None
            ('step',) number () int64
        """
        return _leaves(self)

    def read(self, *, order: Order = "julia", mmap: bool = True) -> dict[str, Any]:
        """Every value in the group, eagerly (one session: shared arrays stay shared);
        ``mmap`` as for :meth:`Node.read`."""
        session = Session(self._reader, order, mmap=mmap)
        return self._read(session)

    def _read(self, session: Session) -> dict[str, Any]:
        with gc_paused():
            return session.fill_group(self._address, self._all(), self.path)

    def __repr__(self) -> str:
        return f"<Group {format_path(self.path)} ({len(self)} entries)>"


def group_links(group: Group) -> dict[str, int]:
    """A group's links: name -> object address, in link order (JLD2's ``/_types`` hidden at the
    root). For tools that walk a file's objects rather than its values (``convert``).

    Example:
        >>> import os, tempfile, treexchange
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=1, b=2)
        >>> with treexchange.open(path) as f:
        ...     list(group_links(f))
        ['a', 'b']
    """
    return group._all()


# --- node factories ---------------------------------------------------------------------------


def node_for_ref(reader: Reader, path: TreePath, address: int) -> Node | Group:
    """The node a reference points to (:data:`UNDEF` for an undefined reference)."""
    if address == 0:
        return _shared_const(reader, path, "singleton", BOTTOM, UNDEF)
    info = reader.described_array(address)
    if info is not None:  # what node_for_dataset makes of it, without its steps (a hot path)
        node = ArrayNode()
        node._reader, node._up, node._seg, node.julia_type = reader, path, None, info.julia_type
        node.shape, node.dtype, node._address = info.shape, info.dtype, address  # type: ignore[assignment]
        return node
    return node_for_dataset(reader, path, address)


_U64 = struct.Struct("<Q")
_unpack_u64 = _U64.unpack_from  # (bound once: a walk unpacks a reference per leaf)


def node_for_dataset(reader: Reader, path: TreePath, address: int) -> Node | Group:
    """The node of the object at ``address`` (parses its header, not its data)."""
    # Described, not necessarily made: the header may be one alike to the dataset's (see
    # Reader.describe), so only its description is used here, and the address given.
    info = reader.describe(address, path)
    if info.kind == "group":
        return Group(reader, path, address)
    plan = info.plan
    assert plan is not None
    if info.kind == "datatype":
        value = type_value(plan.julia_type)
        return _const(reader, path, "singleton", value.type, value)
    if info.shape is None:
        if info.space == "null":
            if isinstance(plan, GhostPlan):
                return ghost_node(reader, path, plan.value, plan.julia_type)
            raise FormatError(
                "null dataspace for a non-empty type", path=path, offset=reader.h5.absolute(address)
            )
        # A scalar dataset's node may build children at once (a Dict reads its keys): one that
        # reaches itself while being built would recurse without end, so it is refused here.
        building = reader.nodes_building
        if address in building:
            raise UnsupportedError(
                "a Dict that contains itself (a reference cycle) cannot be shown as a lazy tree",
                path=path,
                offset=reader.h5.absolute(address),
            )
        if len(building) >= reader.max_refs:  # nested that deep while being built: a limit
            raise LimitError(
                f"values nested deeper than {reader.max_refs} datasets "
                f"(3 * max_depth={reader.limits.max_depth}) while building nodes",
                path=path,
                offset=reader.h5.absolute(address),
            )
        building.add(address)
        try:
            raw = reader.element_bytes_at(info, address, path)
            return node_for_inline(reader, path, plan, raw, 0, address)
        finally:
            building.discard(address)
    if info.dtype is not None:
        return array_node(reader, path, info, address=address)
    info = reader.info(address, path)  # the vectors below read through the header itself
    if isinstance(plan, ReferencePlan) and info.space != "null":
        return RefVectorNode(reader, path, info)
    return InlineVectorNode(reader, path, info)


def node_for_inline(
    reader: Reader,
    path: TreePath,
    plan: Plan,
    buf: Any,
    off: int,
    src: Where | None = None,
) -> Node | Group:
    """The node of one element of ``plan`` stored at ``buf[off:]``.

    ``src`` says how ``read()`` gets the value (default: decode the element; a dataset's own
    element is read through its address so shared objects keep their identity).
    """
    if len(path) > reader.max_path:
        # Nodes that are built at once (a Dict's entries) nest without passing through a
        # dataset when a lying type makes a plan contain itself: the path length bounds them.
        raise LimitError(
            f"path longer than {reader.max_path} segments (4 * max_depth={reader.limits.max_depth} + 16)",
            path=path[:8],
        )
    if isinstance(plan, ReferencePlan):
        return node_for_ref(reader, path, ReferencePlan.address(buf, off))
    if isinstance(plan, UnionElementPlan):
        chosen = plan.t1 if buf[off + plan.mask.offset] == 0 else plan.t2
        return node_for_inline(reader, path, chosen.plan, buf, off + chosen.offset)
    if isinstance(plan, GhostPlan):
        return ghost_node(reader, path, plan.value, plan.julia_type)
    if isinstance(plan, (DataTypePlan, UnionTypePlan)):
        # A type used as a value: its Julia type is Type{T}, so decode it now (it is small).
        value = plan.decode(Session(reader), buf, off, path)
        return _const(reader, path, "singleton", value.type, value)
    if src is None:
        src = _Source(plan=plan, buf=buf, off=off)
    if isinstance(plan, CompoundPlan):
        return _compound_node(reader, path, plan, buf, off, src)
    if isinstance(plan, CustomPlan):
        return _custom_node(reader, path, plan, buf, off, src)
    if isinstance(plan, VlenSequencePlan):
        value = plan.decode(Session(reader), buf, off, path)
        if isinstance(value, np.ndarray):
            node = array_node(reader, path, None, value)
            node.julia_type = plan.julia_type
            return node
        items = value.tolist() if hasattr(value, "tolist") else list(value)
        return ValueVectorNode(
            reader, path, "vector", plan.julia_type, src, items, plan.base.kind, plan.base.julia_type
        )
    return LeafNode(reader, path, plan.kind, plan.julia_type, src)


def _custom_node(
    reader: Reader, path: TreePath, plan: CustomPlan, buf: Any, off: int, src: Where
) -> Node | Group:
    if plan.kind == "dict":
        return _dict_node(reader, path, plan, buf, off, src)
    written = node_for_inline(reader, path, plan.inner, buf, off)
    if plan.kind == "tuple":
        # An NTuple longer than 10 is stored as a Vector at this very path.
        if isinstance(written, ArrayNode):
            values = list(np.asarray(written).ravel(order="F"))
            elt = written.julia_type.params[0] if written.julia_type.params else None
            elt = elt if isinstance(elt, JuliaType) else JuliaType("Core.Any")
            kind = "bool" if written.dtype == np.bool_ else "number"
            return ValueVectorNode(reader, path, "tuple", plan.julia_type, src, values, kind, elt)
        if isinstance(written, ContainerNode):
            return DelegateNode(reader, path, "tuple", plan.julia_type, written, src)
        raise FormatError("NTuple storage is not a vector", path=path)
    if plan.kind == "struct":
        if isinstance(written, ContainerNode) and written.kind in ("struct", "namedtuple"):
            return DelegateNode(reader, path, "struct", plan.julia_type, written, src)
        return FixedNode(reader, path, "struct", plan.julia_type, src, [("written", "written", written)])
    return LeafNode(reader, path, plan.kind, plan.julia_type, src)


def _dict_node(
    reader: Reader, path: TreePath, plan: CustomPlan, buf: Any, off: int, src: Where
) -> ContainerNode:
    """A Dict: entries keyed by the pairs' ``first`` values (read now, to know the kind).

    Like :func:`treexchange._jld2._plans.pairs_to_dict`, a Dict whose keys Python cannot hash
    (arrays, NamedTuples) or holds as one (``:a`` and ``"a"``) is a ``struct`` holding
    ``kvvec``, the vector of pairs.
    """
    base = (*path, "kvvec") if type(plan.inner) is CompoundPlan else path  # (the Pairs' vector)
    primed = reader.primed_pairs(plan, buf, off)
    if primed is not None:  # a Dict in a Dict being walked: its Pairs were read with the outer's
        located = _referenced_pairs(reader, primed, base)
        if located is not None:
            # its values vouched for with the other Dicts' (what _vouched_values finds: the same
            # bound, from which a Dict's values are looked up together)
            handed = reader.primed_values(primed) if len(primed) >= _BULK_MIN else None
            lazy = _lazy_dict_node(reader, path, plan, src, located, base, handed)
            if lazy is not None:
                return lazy
    vector = reader.pair_vector(plan, buf, off, path)  # (no node made for the vector of Pairs)
    if vector is not None:
        located = _referenced_pairs(reader, vector[0], base, vector[1])
        if located is not None:
            lazy = _lazy_dict_node(reader, path, plan, src, located, base)
            if lazy is not None:
                return lazy
    written = node_for_inline(reader, path, plan.inner, buf, off)
    pairs = written
    if isinstance(written, ContainerNode) and written.kind == "struct" and "kvvec" in written:
        pairs = written["kvvec"]
    if isinstance(pairs, ArrayNode) or not isinstance(pairs, ContainerNode):
        raise FormatError("Dict storage is not a vector of Pairs", path=path)
    located = _pair_locations(reader, pairs)
    lazy = _lazy_dict_node(reader, path, plan, src, located, pairs.path) if located is not None else None
    if lazy is not None:
        return lazy
    entries: list[tuple[PathSegment, Any, Node | Group]] = []
    seen: set[Any] = set()
    for _, pair in pairs.children():
        if not isinstance(pair, ContainerNode) or "first" not in pair or "second" not in pair:
            raise FormatError("Dict entry is not a Pair", path=path)
        key = pair["first"].read()
        try:
            if key in seen:
                break
            seen.add(key)
        except TypeError:
            break
        seg = key if isinstance(key, str) else _render_key(key)
        entries.append((seg, key, pair["second"]))
    else:
        return FixedNode(reader, path, "dict", plan.julia_type, src, entries)
    kvvec = _reparent(pairs, (*path, "kvvec"))
    return FixedNode(reader, path, "struct", plan.julia_type, src, [("kvvec", "kvvec", kvvec)])


class DictNode(ContainerNode):
    """A Dict: the keys are decoded when the node is made, straight from the pairs' bytes; a
    value's node is made only when it is looked at, at its own path (no copies of nodes, no
    node per pair). Lookups by key use the container's key index (O(1)).

    Where each pair lies is kept as three lists (its plan, bytes and offset) rather than a
    tuple per entry: a Dict of 100,000 entries then leaves three objects for the cyclic
    garbage collector to scan, not 100,000."""

    __slots__ = (
        "_arrays",
        "_leaf_path_ok",
        "_pair_bufs",
        "_pair_offs",
        "_pair_plans",
        "_refs",
        "_segments",
        "_vouched",
    )

    def __init__(
        self,
        reader: Reader,
        path: TreePath,
        jt: JuliaType,
        src: Where,
        entries: Sequence[tuple[PathSegment, Any]],
        pairs: _Pairs,
        index: dict[Any, int] | None,
    ) -> None:
        super().__init__(reader, path, "dict", jt, src)
        self._keys = entries
        # each entry's path segment, for making a value's node by key
        self._segments = entries._list if type(entries) is _SameEntries else [seg for seg, _ in entries]
        # complete: every key is hashable, and no two are equal; None for String keys known
        # to differ: made from the segments on the first lookup by key (_key_lookup)
        self._index = index
        self._pair_plans, self._pair_bufs, self._pair_offs = pairs
        self._vouched = False
        self._refs: list[int] | None = None  # each value's reference (0: stored inline)
        self._arrays: list[DatasetInfo | None] | None = None  # described_array of each reference
        # a value's path is within the reader's bound (both fixed: asked once, not per leaf)
        self._leaf_path_ok = len(path) < reader.max_path

    def __getitem__(self, key: Any) -> Any:
        # The key index is complete (see __init__), so a hit is the answer _position gives.
        try:
            i = self._index[key]  # type: ignore[index]
        except (KeyError, TypeError):
            return self._key_lookup(key)
        arrays = self._arrays
        if arrays is not None:  # a walk's hot path: what _make makes of a described array, inline
            info = arrays[i]
            if info is not None:
                reader = self._reader
                if self._leaf_path_ok and not reader.closed:
                    # one store a statement (no tuple built and unpacked per leaf), the path
                    # as the Dict's and the key's segment (see ArrayNode.__slots__)
                    leaf = ArrayNode()
                    leaf._reader = reader
                    leaf._up = self.path  # (its path: with the segment, built when asked)
                    leaf._seg = self._segments[i]
                    leaf.julia_type = info.julia_type
                    leaf.shape = info.shape  # type: ignore[assignment]  # (an array's: a tuple and a dtype)
                    leaf.dtype = info.dtype  # type: ignore[assignment]
                    leaf._address = self._refs[i]  # type: ignore[index]  # (set with the arrays)
                    return leaf
        node = self._cache.get(i)
        if node is None:
            node = self._make(i, (*self.path, self._segments[i]))
            if type(node) is not ArrayNode:
                self._cache[i] = node
        return node

    def _key_lookup(self, key: Any) -> Any:
        """``self[key]`` when the key index is not made yet (made now), or misses."""
        if self._index is None:
            segments = self._segments
            self._index = dict(zip(segments, range(len(segments))))
            return self[key]
        return super().__getitem__(key)  # raises as every container does

    def _entries(self) -> Sequence[tuple[PathSegment, Any]]:
        return self._keys or []

    def _make(self, i: int, path: TreePath) -> Node | Group:
        if not self._vouched:
            self._vouched = True
            self._vouch_values()
        refs, reader = self._refs, self._reader
        if refs is not None and refs[i] and len(path) <= reader.max_path:
            arrays = self._arrays
            info = arrays[i] if arrays is not None else None
            if info is not None and not reader.closed:  # what node_for_ref makes, at once
                node = ArrayNode()
                node._reader, node._up, node._seg, node.julia_type = reader, path, None, info.julia_type
                node.shape, node.dtype, node._address = info.shape, info.dtype, refs[i]  # type: ignore[assignment]
                return node
            return node_for_ref(reader, path, refs[i])
        plan = self._pair_plans[i]
        second = plan.fields[1]
        return node_for_inline(
            self._reader, path, second.plan, self._pair_bufs[i], self._pair_offs[i] + second.offset
        )

    def _vouch_values(self) -> None:
        """Check the headers of the values stored by reference all at once, on the first
        look at a value (so that making the node, or reaching one entry, costs nothing more)."""
        found = _vouched_values(self._reader, (self._pair_plans, self._pair_bufs, self._pair_offs), self.path)
        if found is not None:
            self._refs, self._arrays = found


_Vouched = tuple[list[int], list[DatasetInfo | None] | None]
"""Each value's reference, and what :meth:`Reader.described_arrays` gives for them (or None)."""


def _vouched_values(
    reader: Reader, pairs: _Pairs, path: TreePath, keys: list[str] | None = None
) -> _Vouched | None:
    """Each value's reference (0: stored inline) and, for many values (or Dicts), what
    :meth:`Reader.described_arrays` gives for them, their headers checked in bulk first
    (:meth:`Reader.prime`; the Pairs of Dicts among them read too). None for few values.
    ``keys``: filled with the texts of the pairs' String keys when they were decoded with the
    keys of the Dicts among the values (see :func:`_key_elements`)."""
    plans, bufs, offs = pairs
    if len(plans) < _DICTS_MIN:
        return None
    plan, buf = plans[0], bufs[0]
    second = plan.fields[1]
    if type(offs) is range and offs.step >= 8 and type(second.plan) is ReferencePlan:
        # the usual Dict, read in bulk: every value a reference, in one buffer, one pair
        # after the other (a strided view of the references: no copy, no index arrays)
        n, first, step = len(offs), offs.start + second.offset, offs.step
        if first < 0 or first + (n - 1) * step + 8 > len(buf):
            raise FormatError("Dict pair runs past its bytes", path=path)
        found = np.ndarray((n,), "<u8", buf, first, (step,))
        refs = found.tolist()
    else:
        address = ReferencePlan.address
        refs = [
            address(b, o + p.fields[1].offset) if type(p.fields[1].plan) is ReferencePlan else 0
            for p, b, o in zip(plans, bufs, offs)
        ]
        found = np.array([r for r in refs if r], np.uint64)
    if len(found) >= _BULK_MIN or (len(found) >= _DICTS_MIN and _holds_dicts(plan)):
        # (all of them looked up only when the first is known: else they are primed first,
        # as any of them unknown would have them be)
        known = reader.described_array(next((r for r in refs if r), 0)) is not None
        arrays: list[DatasetInfo | None] = reader.described_arrays(refs) if known else [None]
        if None in arrays:  # (not when a Dict above primed them with their Pairs)
            elements = _key_elements(pairs) if keys is not None else None
            texts = reader.prime(found[found != 0], path, dicts=True, keys=elements)
            if texts is not None and keys is not None:
                keys += texts
            arrays = reader.described_all(refs)
        return refs, arrays
    return refs, None


_Pairs = tuple[list[CompoundPlan], list[Any], Sequence[int]]
"""Each pair's plan, buffer and offset. Offsets as a ``range``: one plan, one buffer (read in
bulk, or a vector of inline pairs), pairs one after the other."""


_BULK_MIN = 32  # children from which checking their headers in bulk pays
_BLOCK = 64  # struct elements of a vector of references made together (RefVectorNode._make_block)
_DICTS_MIN = 4  # Dicts in a Dict from which reading all their Pairs at once pays (Reader.prime)
_PAIRS_BULK_MIN = 4  # a Dict's Pairs from which checking them together pays (few: one by one, hdf5)


def _key_elements(pairs: _Pairs) -> tuple[bytes, range] | None:
    """The vlen elements of the pairs' keys when every key is a ``String``: one buffer of them,
    16 bytes each, and their offsets in it (for :meth:`Reader.prime`); None otherwise."""
    elements = []
    for plan, buf, off in zip(*pairs):
        first = plan.fields[0]
        if type(first.plan) is not VlenStringPlan or first.plan.symbol:
            return None
        at = off + first.offset
        element = buf[at : at + 16]
        if at < 0 or len(element) != 16:
            return None
        elements.append(element)
    return b"".join(elements), range(0, 16 * len(elements), 16)


def _holds_dicts(pair: CompoundPlan) -> bool:
    """Whether the Pairs' values are declared Dicts (a Dict of Dicts: its inner Dicts' Pairs are
    worth reading together even when there are few of them)."""
    return pair.fields[1].plan.julia_type.name in ("Base.Dict", "Dict") if len(pair.fields) > 1 else False


def _pair_locations(reader: Reader, pairs: ContainerNode) -> _Pairs | None:
    """Where each ``Pair`` of a Dict's pair vector is stored (plans, buffers, offsets): inline
    in the vector's bytes, or (a vector of references) each in a dataset of its own, read here
    (many alike ones at once: :meth:`Reader.scalar_elements`). None if the pairs are stored in
    a way the general path must handle."""
    if isinstance(pairs, InlineVectorNode):
        plan = pairs._info.plan
        n = len(pairs)
        if not _is_pair_plan(plan) or (pairs._raw is None and n):
            return None
        assert isinstance(plan, CompoundPlan)
        size, raw = plan.size, pairs._raw
        return [plan] * n, [raw] * n, range(0, n * size, size)
    if isinstance(pairs, RefVectorNode):
        pairs._all()
        return _referenced_pairs(reader, pairs._addresses or [], pairs.path, pairs._to_prime)
    return None


def _referenced_pairs(
    reader: Reader, addresses: list[int], base: TreePath, as_read: np.ndarray | None = None
) -> _Pairs | None:
    """:func:`_pair_locations` of a vector of references to Pairs (at path ``base``;
    ``as_read``: the same addresses as the vector's array, when at hand)."""
    primed = reader.primed_run(addresses)  # read with the Pairs of the Dicts around it
    if primed is not None and _is_pair_plan(primed[0].plan):
        info, blob, offsets = primed
        pair_plan = cast(CompoundPlan, info.plan)
        return [pair_plan] * len(addresses), [blob] * len(addresses), offsets
    plans: list[CompoundPlan] = []
    bufs: list[Any] = []
    offs: list[int] = []
    bulk: dict[int, tuple[DatasetInfo, bytes, int]] = {}
    if len(addresses) >= _PAIRS_BULK_MIN:
        wanted = np.array(addresses, np.uint64) if as_read is None else as_read
        scalars, _ = reader.scalar_elements(wanted, base)
        if len(scalars) == 1 and _is_pair_plan(scalars[0][0].plan):
            info, found, blob = scalars[0]
            if len(found) == len(wanted) and bool((found == wanted).all()):  # the usual Dict
                pair_plan = cast(CompoundPlan, info.plan)
                n, size = len(addresses), pair_plan.size
                return [pair_plan] * n, [blob] * n, range(0, n * size, size)
        for info, found, blob in scalars:
            if _is_pair_plan(info.plan):
                size = info.plan.size if info.plan is not None else 0
                for j, address in enumerate(found.tolist()):
                    bulk[address] = (info, blob, j * size)
    for i, address in enumerate(addresses):
        if address == 0:
            return None
        hit = bulk.get(address)
        if hit is not None:
            info, buf, off = hit
        else:
            info = reader.describe(address, (*base, i + 1))
            if info.kind == "group" or info.shape is not None or info.space == "null":
                return None
            if not _is_pair_plan(info.plan):
                return None
            buf, off = reader.element_bytes_at(info, address, (*base, i + 1)), 0
        assert isinstance(info.plan, CompoundPlan)
        plans.append(info.plan)
        bufs.append(buf)
        offs.append(off)
    return plans, bufs, offs


def _is_pair_plan(plan: Plan | None) -> bool:
    return isinstance(plan, CompoundPlan) and [f.name for f in plan.fields] == ["first", "second"]


def _lazy_dict_node(
    reader: Reader,
    path: TreePath,
    plan: CustomPlan,
    src: Where,
    located: _Pairs,
    base: TreePath,
    vouched: _Vouched | None = None,
) -> DictNode | None:
    """A :class:`DictNode` of the Pairs ``located`` (their vector at path ``base``), or None
    when their keys do not make a Python dict (unhashable, or equal in Python): the caller's
    general path decides. ``vouched``: what :func:`_vouched_values` gives for them, when known."""
    with gc_paused():  # thousands of entries: no collection scans the half-built lists
        index: dict[Any, int] = {}
        texts: list[str] | None = None
        if vouched is None and located[0] and _holds_dicts(located[0][0]):
            # The inner Dicts' Pairs and keys first (all together), and this Dict's keys with
            # theirs: they lie in the same heap collections, then parsed in bulk (vlen_texts).
            texts = []
            vouched = _vouched_values(reader, located, path, texts)
        if not texts or len(texts) != len(located[0]):
            texts = _string_keys(reader, located)
        if texts is not None:
            # no two keys equal (a set: a third of what the key index costs, which a walk by
            # leaves() never needs; DictNode makes it on the first lookup by key)
            if len(set(texts)) != len(texts):
                return None
            node = DictNode(reader, path, plan.julia_type, src, _SameEntries(texts), located, None)
            return _with_values(node, vouched)
        session = Session(reader)
        entries: list[tuple[PathSegment, Any]] = []
        for i, (pair, buf, off) in enumerate(zip(*located)):
            first = pair.fields[0]
            key = first.plan.decode(session, buf, off + first.offset, (*base, i + 1, "first"))
            try:
                if key in index:
                    return None
                index[key] = i
            except TypeError:
                return None
            entries.append((key if isinstance(key, str) else _render_key(key), key))
    return _with_values(DictNode(reader, path, plan.julia_type, src, entries, located, index), vouched)


def _with_values(node: DictNode, vouched: _Vouched | None) -> DictNode:
    """``node`` with its values vouched for already (:func:`_vouched_values`), when they are."""
    if vouched is not None:
        node._vouched = True
        node._refs, node._arrays = vouched
    return node


def _string_keys(reader: Reader, located: _Pairs) -> list[str] | None:
    """The ``String`` keys of many pairs of one plan stored in one buffer (a Dict read in bulk),
    decoded together (:func:`vlen_texts`); None for anything else (the one-by-one path)."""
    plans, bufs, offsets = located
    if type(offsets) is not range or len(plans) < _BULK_MIN:
        return None
    first = plans[0].fields[0]
    if type(first.plan) is not VlenStringPlan or first.plan.symbol:
        return None
    texts = reader.keys_of(bufs[0], offsets)  # decoded with the Pairs of the Dicts around it
    if texts is not None:
        return texts
    at = first.offset
    return vlen_texts(reader.h5, bufs[0], range(offsets.start + at, offsets.stop + at, offsets.step))


def _render_key(key: Any) -> str:
    if isinstance(key, np.generic):
        key = key.item()
    return str(key)


def ghost_node(reader: Reader, path: TreePath, value: Any, jt: JuliaType) -> Node:
    """A node for a zero-size value; tuples/NamedTuples of ghosts get ghost children."""
    if isinstance(value, NamedTuple):
        return GhostContainerNode(reader, path, "namedtuple", jt, value)
    if isinstance(value, tuple) and value:
        return GhostContainerNode(reader, path, "tuple", jt, value)
    return _shared_const(reader, path, "singleton", jt, value)


# --- leaves(): every leaf's path and node, with per-leaf work in bulk ---------------------------
# What _nodeproto.walk_leaves gives for any reader's nodes (the same leaves, in the same order,
# each container object descended into once), made for the shapes real checkpoints have:
# * a model's layers (a vector of references to small structs / NamedTuples, read in bulk by
#   Reader.prime): each layer's array fields become leaves straight from the layer's bytes, with
#   no node made for the layer (a node per layer kept alive by its vector is what a walk through
#   node[i] pays, and what makes Python's collector run);
# * the fields of a NamedTuple / struct, and the values of a Dict, that are arrays described
#   already (alike to a described header): an array node made in a few stores;
# * anything else: the child nodes children() gives (the same objects, cached the same way).
# A leaf's path is given whole (a tuple), as the walk builds it anyway: its node keeps it.


def _leaves(node: Node | Group) -> Iterator[tuple[TreePath, Node | Group]]:
    """``(path, node)`` of every leaf at or below ``node``: :func:`walk_leaves` with this
    module's items (above), within the file's node budget; a closed file raises ValueError."""
    reader = node._reader
    if reader.closed:
        reader._check_open()
    return walk_leaves(node, reader.limits.nodes_for(reader.h5.size), _leaf_items, reader)  # type: ignore[return-value]


def _leaf_items(node: Node | Group, seen: set[int]) -> LeafRun | Iterator[_Item]:
    """The children of container ``node``: leaves as ``(path, node)``, containers as nodes."""
    t = type(node)
    if t is DelegateNode:
        target = node._target  # type: ignore[union-attr]
        if target.path == node.path:  # (its children are the written form's, at the same paths)
            t, node = type(target), target
    if t is CompoundNode:
        return _compound_items(node)  # type: ignore[arg-type]
    if t is RefVectorNode:
        return _vector_items(node, seen)  # type: ignore[arg-type]
    if t is DictNode:
        return _dict_children(node)  # type: ignore[arg-type]
    return child_items(node, seen)  # type: ignore[return-value]


def _dict_children(node: DictNode) -> LeafRun | Iterator[_Item]:
    """A Dict's items for :func:`walk_leaves`: a :class:`LeafRun` when every value is an
    array described alike (a model's Dict of weights), else :func:`_dict_items`."""
    if not node._vouched:
        node._vouched = True
        node._vouch_values()
    refs, arrays = node._refs, node._arrays
    if not arrays or refs is None or not node._leaf_path_ok:
        return _dict_items(node)
    info = arrays[0]
    # (a count of identities: ``None in arrays`` would call a header's __eq__ per value)
    if info is None or arrays.count(info) != len(arrays):
        return _dict_items(node)
    return LeafRun(len(arrays), _alike_leaves(node._reader, node.path, node._segments, refs, info))


def _alike_leaves(
    reader: Reader, path: TreePath, segments: list[PathSegment], refs: list[int], info: DatasetInfo
) -> Iterator[tuple[TreePath, ArrayNode]]:
    """The leaves of a Dict whose values are the arrays at ``refs``, all described by
    ``info``: what :func:`_dict_items` gives for them, checking the file is open before each
    (:class:`LeafRun`)."""
    jt, shape, dtype = info.julia_type, info.shape, info.dtype
    for segment, ref in zip(segments, refs):
        if reader.closed:
            reader._check_open()
        leaf = ArrayNode()
        leaf._reader = reader
        leaf._up = leaf_path = (*path, segment)
        leaf._seg = None
        leaf.julia_type = jt
        leaf.shape, leaf.dtype = shape, dtype  # type: ignore[assignment]
        leaf._address = ref
        yield leaf_path, leaf


class _Passed:
    """A layer :func:`_vector_items` lists from its bytes, given to :func:`walk_leaves` in its
    place: counted toward the node budget as the layer's node would be (a LimitError names its
    path), and not descended into (its address is in ``seen`` already)."""

    __slots__ = ("object_address", "path")

    def __init__(self) -> None:
        self.path: TreePath = ()
        self.object_address = 0


_Item = tuple[TreePath, Node | Group] | Node | Group | _Passed
"""What a container's items give: ``(path, leaf)``, a container to descend into, or a layer
passed (:class:`_Passed`)."""


def _array_leaf(reader: Reader, path: TreePath, address: int) -> ArrayNode | None:
    """The node of the numeric array dataset at ``address`` when its header is described
    already (:meth:`Reader.described_array`); None when it is not such an array, or not known
    yet (then the usual way makes it)."""
    info = reader.described_array(address)
    return None if info is None else array_node(reader, path, info, address=address)


def _compound_items(node: CompoundNode) -> Iterator[_Item]:
    """A NamedTuple's / struct's / Tuple's fields: arrays stored by reference straight from
    the bytes, every other field as its node."""
    reader, path = node._reader, node.path
    plan, buf, off = node._plan, node._buf, node._off
    fields = plan.fields
    short = len(path) < reader.max_path  # (a leaf's path within the bound: else its node raises)
    for i, (seg, _) in enumerate(plan.entries):
        f = fields[i]
        if short and type(f.plan) is ReferencePlan:
            leaf_path = (*path, seg)
            leaf = _array_leaf(reader, leaf_path, _unpack_u64(buf, off + f.offset)[0])
            if leaf is not None:
                yield leaf_path, leaf
                continue
        yield _item(node._child(i))


def _vector_items(vector: RefVectorNode, seen: set[int]) -> Iterator[_Item]:
    """A vector of references' elements; one that ``Reader.prime`` read as a small struct (a
    model's layer) and that has no node yet is walked from its bytes, with no node made: each
    field that is a described array becomes a leaf at once (its header looked up inline: a
    model's walk makes a leaf per array here), any other field is reached through the element's
    node."""
    reader, path = vector._reader, vector.path
    addresses = vector._prime()
    elements, groups, objects = reader._elements, reader._element_groups, reader.h5._objects
    vouched = reader.h5.enter_vouched()  # (looked up per element below)
    cache = vector._cache
    short = len(path) + 1 < reader.max_path  # (a layer's fields' paths within the bound)
    group = -1
    fields: list[tuple[int, Any, int]] = []  # (position, segment, offset of a reference or -1)
    passed = _Passed()  # (one for the vector: the walk looks at it before the next is given)
    for j, address in enumerate(addresses):
        found = elements.get(address) if short else None
        if found is not None and j not in cache and address not in objects:
            if found & _GROUP_MASK != group:  # (a vector's elements: mostly one group)
                group = found & _GROUP_MASK
                info, blob = groups[group]
                plan = info.plan
                fields = _field_offsets(plan) if type(plan) is CompoundPlan else []
            if fields:
                layer_path = (*path, j + 1)
                # the layer counted as the walk counts each container it meets (its budget)
                passed.path, passed.object_address = layer_path, address
                if address in seen:
                    yield passed
                    continue  # the same struct met before (shared, or a cycle): listed there
                seen.add(address)
                yield passed
                off = found >> _OFFSET_SHIFT
                for i, seg, at in fields:
                    if at >= 0:
                        ref = _unpack_u64(blob, off + at)[0]
                        described: DatasetInfo | None = vouched.get(ref)  # type: ignore[assignment]
                        if described is None:
                            described = objects.get(ref)  # type: ignore[assignment]
                        if (
                            described is not None
                            and described.value_kind is not None
                            and described.dtype is not None
                        ):
                            # what array_node makes of described_array's answer, inline: a
                            # model's walk makes a node per array here, and a call per leaf cost
                            # 4 % of the walk
                            leaf = ArrayNode()
                            leaf._reader = reader
                            leaf._up = leaf_path = (*layer_path, seg)
                            leaf._seg = None
                            leaf.julia_type = described.julia_type
                            leaf.shape, leaf.dtype = described.shape, described.dtype  # type: ignore[assignment]
                            leaf._address = ref
                            yield leaf_path, leaf
                            continue
                    layer = vector._child(j)  # (made once, then kept by the vector)
                    yield _item(cast(ContainerNode, layer)._child(i))
                continue
        yield _item(vector._child(j))


def _field_offsets(plan: CompoundPlan) -> list[tuple[int, Any, int]]:
    """Each field's position, path segment and the offset of its reference (-1: not stored
    by reference)."""
    return [
        (i, seg, f.offset if type(f.plan) is ReferencePlan else -1)
        for i, ((seg, _), f) in enumerate(zip(plan.entries, plan.fields))
    ]


def _item(child: Node | Group) -> _Item:
    return child if is_container(child) else (child.path, child)


def _dict_items(node: DictNode) -> Iterator[_Item]:
    """A Dict's values (its values vouched for already, :func:`_dict_children`): those that are
    described arrays straight from the references its Pairs hold, the others as their nodes."""
    reader, path = node._reader, node.path
    refs, segments = node._refs, node._segments
    arrays = node._arrays if node._leaf_path_ok else None  # (else a value's node raises)
    for i in range(len(segments)):
        info = arrays[i] if arrays is not None else None
        if info is not None:
            leaf_path = (*path, segments[i])
            yield leaf_path, array_node(reader, leaf_path, info, address=refs[i])  # type: ignore[index]
            continue
        yield _item(node._child(i))
