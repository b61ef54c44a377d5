"""Lazy nodes: a JLD2 file's values as a tree that is read only where it is looked at.

Every node has ``path`` (segments as in ``inspect --json``: names and 1-based positions),
``kind`` (``namedtuple``, ``tuple``, ``vector``, ``dict``, ``struct``, ``array``, ``number``,
``bool``, ``string``, ``symbol``, ``singleton``), ``julia_type`` and ``read()``. Building a node
parses at most the object header of the dataset it stands for; array data is read by
``read()``, slicing, or ``numpy.asarray``. Children are created on first access.

Indexing follows the Python value a node reads as: NamedTuple/struct fields and dict entries by
key, tuple and vector elements by 0-based position (like the ``tuple``/``list`` that ``read()``
returns), numeric arrays like the numpy array in Julia's shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import numpy as np

from .._errors import FormatError
from .._juliatype import JuliaType
from .._values import NamedTuple
from ._plans import (
    CompoundPlan,
    CustomPlan,
    GhostPlan,
    Path,
    Plan,
    ReferencePlan,
    UnionElementPlan,
    VlenSequencePlan,
)
from ._reader import DatasetInfo, Order, Reader, Session, gc_paused
from ._typeutil import NOTHING, is_namedtuple_type, is_tuple_type, namedtuple_names_types, tuple_element_types

Segment = str | int
Thunk = Callable[[], "Node | Group"]

CONTAINER_KINDS = frozenset({"namedtuple", "tuple", "vector", "dict", "struct"})


def _segment_key(seg: Segment) -> str:
    return seg if isinstance(seg, str) else str(seg)


class Node:
    """A value in an open JLD2 file (see the module docstring).

    Attributes:
        path: tree path (first segment = top-level name; 1-based ints for positions).
        kind: the inspect kind.
        julia_type: the Julia type of the value.
    """

    __slots__ = ("_reader", "julia_type", "kind", "path")

    def __init__(self, reader: Reader, path: Path, kind: str, julia_type: JuliaType) -> None:
        self._reader = reader
        self.path = path
        self.kind = kind
        self.julia_type = julia_type

    # --- reading ----------------------------------------------------------------------------
    def read(self, *, order: Order = "julia") -> Any:
        """The whole value (arrays as numpy views of the file when stored uncompressed)."""
        return self._read(Session(self._reader, order))

    def _read(self, session: Session) -> Any:
        raise NotImplementedError

    # --- children (containers override) -------------------------------------------------------
    def children(self) -> Iterator[tuple[Segment, Node | Group]]:
        """Child nodes in order with their path segments (none for leaves and arrays)."""
        return iter(())

    def __getitem__(self, key: Any) -> Any:
        raise TypeError(f"a {self.kind} node has no children")

    def __len__(self) -> int:
        raise TypeError(f"a {self.kind} node has no length")

    def __iter__(self) -> Iterator[Any]:
        raise TypeError(f"a {self.kind} node is not iterable")

    def __repr__(self) -> str:
        from .._errors import format_path

        return f"<{type(self).__name__} {format_path(self.path)}: {self.kind} {self.julia_type}>"


class LeafNode(Node):
    """A number, Bool, String, Symbol or singleton; ``read()`` decodes it."""

    __slots__ = ("_decode",)

    def __init__(
        self, reader: Reader, path: Path, kind: str, julia_type: JuliaType, decode: Callable[[Session], Any]
    ) -> None:
        super().__init__(reader, path, kind, julia_type)
        self._decode = decode

    def _read(self, session: Session) -> Any:
        return self._decode(session)


class ArrayNode(Node):
    """A numeric (numbers, Bool, Complex, BFloat16) array; no data is read until asked.

    ``shape`` is Julia's (``W[i, j]`` is ``node[i-1, j-1]``); slicing returns numpy arrays and
    reads only the needed part of the memory map. ``numpy.asarray(node)`` reads it all.
    """

    __slots__ = ("_info", "_value")

    def __init__(
        self, reader: Reader, path: Path, info: DatasetInfo | None, value: np.ndarray | None = None
    ) -> None:
        jt = info.julia_type if info is not None else JuliaType("Core.Array")
        super().__init__(reader, path, "array", jt)
        self._info = info
        self._value = value

    @property
    def shape(self) -> tuple[int, ...]:
        """Julia's shape."""
        if self._info is not None:
            assert self._info.shape is not None
            return self._info.shape
        assert self._value is not None
        return tuple(self._value.shape)

    @property
    def dtype(self) -> np.dtype:
        if self._info is not None:
            assert self._info.dtype is not None
            return self._info.dtype
        assert self._value is not None
        return self._value.dtype

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

    def _array(self, order: Order) -> np.ndarray:
        if self._info is not None:
            return self._reader.numeric_array(self._info, order)
        assert self._value is not None
        return self._value if order == "julia" else self._value.T

    def _read(self, session: Session) -> Any:
        if self._info is not None:
            return session.load_ref(self._info.address, self.path)
        return self._array(session.order)

    def __getitem__(self, index: Any) -> Any:
        return self._array("julia")[index]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = self._array("julia")
        if dtype is not None:
            arr = arr.astype(dtype)
        return arr

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-dimensional array")
        return self.shape[0]


class ContainerNode(Node):
    """A NamedTuple, Tuple, vector (list / JuliaArray), Dict or struct.

    ``entries`` are ``(segment, key, thunk)``: the inspect path segment, the Python key
    (field name, dict key, or 0-based position) and a function making the child node.
    """

    __slots__ = ("_cache", "_entries", "_make_entries", "_read_value", "shape")

    def __init__(
        self,
        reader: Reader,
        path: Path,
        kind: str,
        julia_type: JuliaType,
        entries: Callable[[], list[tuple[Segment, Any, Thunk]]],
        read_value: Callable[[Session], Any],
        shape: tuple[int, ...] | None = None,
    ) -> None:
        super().__init__(reader, path, kind, julia_type)
        self._make_entries = entries
        self._entries: list[tuple[Segment, Any, Thunk]] | None = None
        self._cache: dict[int, Node | Group] = {}
        self._read_value = read_value
        self.shape = shape

    def _all(self) -> list[tuple[Segment, Any, Thunk]]:
        if self._entries is None:
            self._entries = self._make_entries()
        return self._entries

    def _child(self, i: int) -> Node | Group:
        node = self._cache.get(i)
        if node is None:
            node = self._all()[i][2]()
            self._cache[i] = node
        return node

    def keys(self) -> list[Any]:
        """Field names / dict keys (for tuples and vectors: 0-based positions)."""
        return [key for _, key, _ in self._all()]

    def children(self) -> Iterator[tuple[Segment, Node | Group]]:
        for i, (seg, _, _) in enumerate(self._all()):
            yield seg, self._child(i)

    def __len__(self) -> int:
        return len(self._all())

    def __iter__(self) -> Iterator[Any]:
        if self.kind in ("tuple", "vector"):
            return (self._child(i) for i in range(len(self)))
        return iter(self.keys())

    def __getitem__(self, key: Any) -> Any:
        entries = self._all()
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
        for i, (_, k, _) in enumerate(entries):
            if type(k) is type(key) and k == key:
                return self._child(i)
        for i, (_, k, _) in enumerate(entries):  # e.g. a Python int for an Int64 dict key
            if k == key:
                return self._child(i)
        raise KeyError(key)

    def __contains__(self, key: Any) -> bool:
        return any(k == key for _, k, _ in self._all())

    def _read(self, session: Session) -> Any:
        return self._read_value(session)


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


class Group(Mapping[str, "Node | Group"]):
    """An HDF5 group of a JLD2 file (``f["a/b"] = x`` in Julia): a mapping of names to nodes.

    ``read()`` gives a ``dict`` (nested groups as nested dicts).
    """

    kind = "group"
    julia_type = JuliaType("JLD2.Group")

    def __init__(self, reader: Reader, path: Path, address: int) -> None:
        self._reader = reader
        self.path = path
        self._address = address
        self._links: dict[str, int] | None = None
        self._cache: dict[str, Node | Group] = {}

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

    def children(self) -> Iterator[tuple[Segment, Node | Group]]:
        for name in self._all():
            yield name, self._entry(name)

    def read(self, *, order: Order = "julia") -> dict[str, Any]:
        """Every value in the group, eagerly (one session: shared arrays stay shared)."""
        session = Session(self._reader, order)
        return self._read(session)

    def _read(self, session: Session) -> dict[str, Any]:
        with gc_paused():
            return {name: session.load_ref(addr, (*self.path, name)) for name, addr in self._all().items()}

    def __repr__(self) -> str:
        from .._errors import format_path

        return f"<Group {format_path(self.path)} ({len(self)} entries)>"


# --- node factories ---------------------------------------------------------------------------


def node_for_dataset(reader: Reader, path: Path, address: int) -> Node | Group:
    """The node of the object at ``address`` (parses its header, not its data)."""
    info = reader.info(address, path)
    if info.kind == "group":
        return Group(reader, path, address)
    plan = info.plan
    assert plan is not None
    if info.kind == "datatype":
        jt = plan.julia_type
        return LeafNode(reader, path, "singleton", JuliaType("Core.DataType"), lambda s: jt)
    if info.shape is None:
        if info.space == "null":
            if isinstance(plan, GhostPlan):
                return ghost_node(reader, path, plan.value, plan.julia_type)
            raise FormatError("null dataspace for a non-empty type", path=path, offset=info.obj.offset)
        raw = reader.raw(info, plan.size)

        def read_scalar(session: Session) -> Any:
            return session.load_ref(address, path)

        return node_for_inline(reader, path, plan, raw, 0, read_scalar)
    if info.dtype is not None:
        return ArrayNode(reader, path, info)
    return _object_array_node(reader, path, info)


def _object_array_node(reader: Reader, path: Path, info: DatasetInfo) -> ContainerNode:
    plan = info.plan
    assert plan is not None and info.shape is not None
    address = info.address

    def entries() -> list[tuple[Segment, Any, Thunk]]:
        n = info.count
        out: list[tuple[Segment, Any, Thunk]] = []
        if isinstance(plan, ReferencePlan) and info.space != "null":
            for i, addr in enumerate(reader.element_addresses(info)):
                out.append((i + 1, i, _ref_thunk(reader, (*path, i + 1), addr)))
            return out
        if info.space == "null" or isinstance(plan, GhostPlan):
            for i in range(n):
                p = (*path, i + 1)
                out.append((i + 1, i, partial(node_for_inline, reader, p, plan, b"", 0)))
            return out
        raw = reader.raw(info, n * plan.size)
        size = plan.size
        for i in range(n):
            p = (*path, i + 1)
            out.append((i + 1, i, partial(node_for_inline, reader, p, plan, raw, i * size)))
        return out

    def read(session: Session) -> Any:
        return session.load_ref(address, path)

    return ContainerNode(reader, path, "vector", info.julia_type, entries, read, shape=info.shape)


def _ref_thunk(reader: Reader, path: Path, address: int) -> Thunk:
    def make() -> Node | Group:
        if address == 0:
            return LeafNode(reader, path, "singleton", NOTHING, lambda s: None)
        return node_for_dataset(reader, path, address)

    return make


def node_for_inline(
    reader: Reader,
    path: Path,
    plan: Plan,
    buf: Any,
    off: int,
    read_self: Callable[[Session], Any] | None = None,
) -> Node | Group:
    """The node of one element of ``plan`` stored at ``buf[off:]``."""
    if read_self is None:

        def read_self(session: Session) -> Any:
            return plan.decode(session, buf, off, path)

    if isinstance(plan, ReferencePlan):
        return _ref_thunk(reader, path, ReferencePlan.address(buf, off))()
    if isinstance(plan, UnionElementPlan):
        chosen = plan.t1 if buf[off + plan.mask.offset] == 0 else plan.t2
        return node_for_inline(reader, path, chosen.plan, buf, off + chosen.offset)
    if isinstance(plan, GhostPlan):
        return ghost_node(reader, path, plan.value, plan.julia_type)
    if isinstance(plan, CompoundPlan):
        return _compound_node(reader, path, plan, buf, off, read_self)
    if isinstance(plan, CustomPlan):
        return _custom_node(reader, path, plan, buf, off, read_self)
    if isinstance(plan, VlenSequencePlan):
        value = plan.decode(Session(reader), buf, off, path)
        if isinstance(value, np.ndarray):
            node = ArrayNode(reader, path, None, value)
            node.julia_type = plan.julia_type
            return node
        return _value_vector_node(reader, path, plan.julia_type, plan.base, value)
    return LeafNode(reader, path, plan.kind, plan.julia_type, read_self)


def _compound_node(
    reader: Reader, path: Path, plan: CompoundPlan, buf: Any, off: int, read_self: Callable[[Session], Any]
) -> ContainerNode:
    tuple_like = plan.kind == "tuple"

    def entries() -> list[tuple[Segment, Any, Thunk]]:
        out: list[tuple[Segment, Any, Thunk]] = []
        for i, f in enumerate(plan.fields):
            seg: Segment = i + 1 if tuple_like else f.name
            key: Any = i if tuple_like else f.name
            p = (*path, seg)
            out.append((seg, key, partial(node_for_inline, reader, p, f.plan, buf, off + f.offset)))
        return out

    return ContainerNode(reader, path, plan.kind, plan.julia_type, entries, read_self)


def _custom_node(
    reader: Reader, path: Path, plan: CustomPlan, buf: Any, off: int, read_self: Callable[[Session], Any]
) -> Node | Group:
    inner = plan.inner
    if plan.kind == "dict":
        return _dict_node(reader, path, plan, buf, off, read_self)
    if plan.kind == "tuple":

        def tuple_entries() -> list[tuple[Segment, Any, Thunk]]:
            written = node_for_inline(reader, path, inner, buf, off)
            if isinstance(written, ArrayNode):
                values = list(np.asarray(written).ravel(order="F"))
                elt = written.julia_type.params[0] if written.julia_type.params else JuliaType("Core.Any")
                kind = "bool" if written.dtype == np.bool_ else "number"
                return [
                    (i + 1, i, _const_leaf(reader, (*path, i + 1), kind, elt, v))
                    for i, v in enumerate(values)
                ]
            if isinstance(written, ContainerNode):
                # The stored vector sits at this very path: its entries are ours (built lazily).
                return written._all()
            raise FormatError("NTuple storage is not a vector", path=path)

        return ContainerNode(reader, path, "tuple", plan.julia_type, tuple_entries, read_self)
    if plan.kind == "struct":

        def struct_entries() -> list[tuple[Segment, Any, Thunk]]:
            written = node_for_inline(reader, path, inner, buf, off)
            if isinstance(written, ContainerNode) and written.kind in ("struct", "namedtuple"):
                return written._all()
            return [("written", "written", lambda: written)]

        return ContainerNode(reader, path, "struct", plan.julia_type, struct_entries, read_self)
    return LeafNode(reader, path, plan.kind, plan.julia_type, read_self)


def _dict_node(
    reader: Reader, path: Path, plan: CustomPlan, buf: Any, off: int, read_self: Callable[[Session], Any]
) -> ContainerNode:
    """A Dict: entries keyed by the pairs' ``first`` values (read now, to know the kind).

    Like :func:`treexchange._jld2._plans.pairs_to_dict`, a Dict whose keys Python cannot hash
    (arrays, NamedTuples) is a ``struct`` holding ``kvvec``, the vector of pairs.
    """
    written = node_for_inline(reader, path, plan.inner, buf, off)
    pairs = written
    if isinstance(written, ContainerNode) and written.kind == "struct" and "kvvec" in written:
        pairs = written["kvvec"]
    if isinstance(pairs, ArrayNode) or not isinstance(pairs, ContainerNode):
        raise FormatError("Dict storage is not a vector of Pairs", path=path)
    entries: list[tuple[Segment, Any, Thunk]] = []
    hashable = True
    for _, pair in pairs.children():
        if not isinstance(pair, ContainerNode) or "first" not in pair or "second" not in pair:
            raise FormatError("Dict entry is not a Pair", path=path)
        key = pair["first"].read()
        try:
            hash(key)
        except TypeError:
            hashable = False
            break
        seg = key if isinstance(key, str) else _render_key(key)
        entries.append((seg, key, _repath(pair, "second", (*path, seg))))
    if hashable:
        return ContainerNode(reader, path, "dict", plan.julia_type, lambda: entries, read_self)
    kv_path = (*path, "kvvec")
    kvvec = _reparent(pairs, kv_path)
    return ContainerNode(
        reader, path, "struct", plan.julia_type, lambda: [("kvvec", "kvvec", lambda: kvvec)], read_self
    )


def _render_key(key: Any) -> str:
    if isinstance(key, np.generic):
        key = key.item()
    return str(key)


def _const_leaf(reader: Reader, path: Path, kind: str, jt: Any, value: Any) -> Thunk:
    jt = jt if isinstance(jt, JuliaType) else JuliaType("Core.Any")
    return lambda: LeafNode(reader, path, kind, jt, lambda s: value)


def _repath(container: ContainerNode, key: str, path: Path) -> Thunk:
    return lambda: _reparent(container[key], path)


def _reparent_thunk(thunk: Thunk, path: Path) -> Thunk:
    return lambda: _reparent(thunk(), path)


def _reparent(node: Node | Group, path: Path) -> Node | Group:
    """A node seen through another path (dict values, custom-serialized fields)."""
    if isinstance(node, Group) or node.path == path:
        return node
    import copy

    clone = copy.copy(node)
    clone.path = path
    if isinstance(clone, ContainerNode):
        # Children must be rebuilt under the new path.
        clone._entries = None
        clone._cache = {}
        inner = node
        assert isinstance(inner, ContainerNode)

        def entries() -> list[tuple[Segment, Any, Thunk]]:
            return [(seg, key, _reparent_thunk(thunk, (*path, seg))) for seg, key, thunk in inner._all()]

        clone._make_entries = entries
    return clone


def ghost_node(reader: Reader, path: Path, value: Any, jt: JuliaType) -> Node:
    """A node for a zero-size value; tuples/NamedTuples of ghosts get ghost children."""
    if isinstance(value, NamedTuple) and len(value):
        parsed = namedtuple_names_types(jt, reader.type_limits) if is_namedtuple_type(jt) else None
        types = dict(zip(*parsed)) if parsed is not None else {}

        def nt_entries() -> list[tuple[Segment, Any, Thunk]]:
            return [(k, k, _ghost_thunk(reader, (*path, k), v, types.get(k))) for k, v in value.items()]

        return ContainerNode(reader, path, "namedtuple", jt, nt_entries, lambda s: value)
    if isinstance(value, NamedTuple):
        return ContainerNode(reader, path, "namedtuple", jt, list, lambda s: value)
    if isinstance(value, tuple) and value:
        elems = tuple_element_types(jt, reader.type_limits) if is_tuple_type(jt) else []

        def t_entries() -> list[tuple[Segment, Any, Thunk]]:
            return [
                (i + 1, i, _ghost_thunk(reader, (*path, i + 1), v, elems[i] if i < len(elems) else None))
                for i, v in enumerate(value)
            ]

        return ContainerNode(reader, path, "tuple", jt, t_entries, lambda s: value)
    return LeafNode(reader, path, "singleton", jt, lambda s: value)


def _ghost_thunk(reader: Reader, path: Path, value: Any, jt: Any) -> Thunk:
    if not isinstance(jt, JuliaType):
        jt = _ghost_type_of(value)
    return lambda: ghost_node(reader, path, value, jt)


def _ghost_type_of(value: Any) -> JuliaType:
    from .._values import MISSING, Singleton

    if value is None:
        return NOTHING
    if value is MISSING:
        return JuliaType("Base.Missing")
    if isinstance(value, Singleton):
        return value.type
    if value == ():
        return JuliaType("Tuple")
    return JuliaType("Core.Any")


def _value_vector_node(reader: Reader, path: Path, jt: JuliaType, base: Plan, value: Any) -> ContainerNode:
    items = value.tolist() if hasattr(value, "tolist") else list(value)

    def entries() -> list[tuple[Segment, Any, Thunk]]:
        return [
            (i + 1, i, _const_leaf(reader, (*path, i + 1), base.kind, base.julia_type, v))
            for i, v in enumerate(items)
        ]

    return ContainerNode(reader, path, "vector", jt, entries, lambda s: value, shape=(len(items),))
