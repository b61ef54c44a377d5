"""The node protocol: what every lazy node of an opened file answers, whatever read the file.

Two readers hand out lazy nodes: treexchange's own JLD2 codec (:mod:`treexchange._jld2._nodes`:
``Group``, ``Node`` and its subclasses, and the root :class:`treexchange.File`) and h5py for plain
HDF5 files opened with ``allow_hdf5=True`` (:mod:`treexchange._plainhdf5`: ``PlainFile``,
``PlainNode``, ``ValueNode``). Both implement :class:`LazyNode`, and their root objects
:class:`LazyFile`; ``treexchange.open`` returns a :class:`LazyFile`. Everything that walks a file
(``inspect``, the schema's file sources, the conversion sources of other formats) is written
against these two protocols and nothing else.

A node answers:

* ``kind``: the ``inspect`` kind (``namedtuple``, ``tuple``, ``vector``, ``dict``, ``struct``,
  ``array``, ``number``, ``bool``, ``string``, ``symbol``, ``singleton``), or ``group`` for an HDF5
  group;
* ``julia_type``: the Julia type (a :class:`treexchange.JuliaType`; ``str()`` of it is the text
  Julia prints);
* ``path``: the tree path (first segment = top-level name; 1-based ``int`` positions);
* ``object_address``: for a container stored as an object of its own, its address (the same
  address twice is one shared object, or a cycle); ``None`` when it has none or it is unknown;
* children: ``children()`` gives ``(segment, node)`` pairs in order; ``node[key]`` indexes like
  the Python value the node reads as (fields and dict keys by key, tuple and vector elements by
  0-based position, groups by name), ``len`` and ``iter`` follow the same value;
* ``leaves()``: ``(path, node)`` of every leaf below (arrays, numbers, strings, ...: every node
  that is neither a container nor a group), in order (:func:`walk_leaves` says which);
* arrays: ``shape`` (Julia's order) and ``dtype`` (numpy), ``node[index]`` slices like the numpy
  array in Julia's shape, reading only what is needed;
* numbers and Bools: ``shape`` ``()`` and ``dtype`` the numpy dtype of their Julia type, or
  ``None`` when numpy has none (``Int128``, ``BigInt``, a primitive type of the file's own), as a
  numpy scalar would say and as the schema's ``dtype`` says (:func:`scalar_dtype`); vectors give
  their shape and no ``dtype``; every other kind ``None`` for both -- the same answers from a
  JLD2, a BSON.jl and a plain HDF5 file of the same value;
* ``read(order=..., mmap=...)``: the whole value in the value model.

The protocols are ``runtime_checkable``, but such an ``isinstance`` looks up every member
(some 20 µs): code that tells nodes from values once per node uses :func:`is_node`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Literal, Protocol, TypeGuard, TypeVar, runtime_checkable

import numpy as np

from ._errors import LimitError, PathSegment, TreePath
from ._juliatype import JuliaType
from ._limits import Limits
from ._typeof import numpy_dtype

CONTAINER_KINDS = frozenset({"namedtuple", "tuple", "vector", "dict", "struct"})
"""The kinds of values with children (groups, kind ``group``, have children too)."""

Order = Literal["julia", "storage"]
"""Array order of what is read: ``"julia"`` (Julia's shape, F-ordered) or ``"storage"`` (the
reversed-dims, C-ordered view of the same bytes, what h5py shows)."""


class Closable(Protocol):
    """An open file as :func:`walk_leaves` looks at it between leaves."""

    closed: bool

    def _check_open(self) -> None: ...


class LeafRun:
    """What an ``items`` function may give :func:`walk_leaves` for a container whose children
    are all leaves (a Dict of arrays): how many there are, and an iterator of them as
    ``(path, leaf)`` that checks itself, before each leaf, that the file is still open (as
    the walk does). The walk then counts them at once and hands them on as they come, with
    no step of its own per leaf (a model's Dict of a thousand arrays: a twentieth of its walk).
    """

    __slots__ = ("count", "leaves")

    def __init__(self, count: int, leaves: Iterator[tuple[TreePath, Any]]) -> None:
        self.count = count
        self.leaves = leaves


@runtime_checkable
class LazyNode(Protocol):
    """A node of an opened file (see the module docstring)."""

    @property
    def kind(self) -> str: ...

    @property
    def julia_type(self) -> JuliaType: ...

    @property
    def path(self) -> TreePath: ...

    @property
    def object_address(self) -> int | None: ...

    @property
    def shape(self) -> tuple[int, ...] | None: ...

    @property
    def dtype(self) -> np.dtype | None: ...

    def children(self) -> Iterator[tuple[PathSegment, LazyNode]]: ...

    def leaves(self) -> Iterator[tuple[TreePath, LazyNode]]: ...

    def __getitem__(self, key: Any) -> Any: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Any]: ...

    def read(self, *, order: Order = "julia", mmap: bool = True) -> Any: ...


@runtime_checkable
class LazyFile(LazyNode, Protocol):
    """An opened file: its root group (a :class:`LazyNode` of kind ``group``, a mapping of
    top-level names to nodes), what the header says, the root's attributes, the ``limits`` it is
    read with and its size in bytes (``file_size``: the bounds that scale with the file, such as
    how many nodes a listing may visit, derive from it), and ``close``."""

    @property
    def filename(self) -> str: ...

    @property
    def format_version(self) -> str: ...

    @property
    def producer(self) -> str: ...

    @property
    def header(self) -> str: ...

    @property
    def legacy_header(self) -> bool: ...

    @property
    def closed(self) -> bool: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def file_size(self) -> int: ...

    @property
    def attrs(self) -> dict[str, Any]: ...

    def __getitem__(self, key: Any) -> LazyNode: ...

    def read(self, name: str | None = None, *, order: Order = "julia", mmap: bool = True) -> Any: ...

    def close(self) -> None: ...

    def __enter__(self) -> LazyFile: ...

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None: ...


_Closing = TypeVar("_Closing", bound="ClosingFile")


class ClosingFile:
    """An opened file as a context manager (``with treexchange.open(path) as f:``): ``close`` on
    leaving the block, whatever ended it. The file classes (:class:`treexchange.File`,
    ``BsonFile``, ``PlainFile``, the HDF5 layer's ``HDF5File``) derive from it and define
    ``close``.

    Example:
        >>> class Demo(ClosingFile):
        ...     def close(self) -> None:
        ...         print("closed")
        >>> with Demo() as d:
        ...     type(d).__name__
        'Demo'
        closed
    """

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Closing) -> _Closing:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_NODE_TYPES: dict[type, bool] = {}
"""Type -> whether its instances are :class:`LazyNode` s (a handful of classes ever asked)."""


def is_node(x: object) -> TypeGuard[LazyNode]:
    """Whether ``x`` is a lazy node, decided once per type (a runtime-checkable ``isinstance``
    looks up every member of the protocol on every call; the node classes set them all in
    ``__init__`` or on the class, so the answer is the same for every instance of a type).

    Example:
        >>> import numpy as np
        >>> is_node(np.zeros(2)), is_node(None)
        (False, False)
    """
    t = type(x)
    hit = _NODE_TYPES.get(t)
    if hit is None:
        hit = isinstance(x, LazyNode)
        if len(_NODE_TYPES) < 256:
            _NODE_TYPES[t] = hit
    return hit


def scalar_dtype(kind: str, julia_type: JuliaType) -> np.dtype | None:
    """The ``dtype`` a node of ``kind`` (not an array) and ``julia_type`` gives: a number's or a
    Bool's numpy dtype when numpy has one, else ``None`` (every reader answers by this rule).

    Example:
        >>> scalar_dtype("number", JuliaType("Core.Float32"))
        dtype('float32')
        >>> scalar_dtype("string", JuliaType("Core.String")) is None
        True
        >>> scalar_dtype("number", JuliaType("Core.Int128")) is None  # numpy has no 128-bit int
        True
    """
    if kind != "number" and kind != "bool":
        return None
    return numpy_dtype(julia_type)


def scalar_shape(kind: str) -> tuple[()] | None:
    """The ``shape`` a node of ``kind`` that is neither an array nor a vector gives: ``()`` for a
    number or a Bool (as a numpy scalar's), ``None`` for anything else.

    Example:
        >>> scalar_shape("number"), scalar_shape("string")
        ((), None)
    """
    return () if kind == "number" or kind == "bool" else None


def is_container(node: LazyNode) -> bool:
    """Whether ``node`` has children: a group, or a value of a container kind (an empty one too).

    Example:
        >>> import os, tempfile, numpy as np
        >>> import treexchange
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     is_container(f), is_container(f["a"])
        (True, False)
    """
    kind = node.kind
    return kind == "group" or kind in CONTAINER_KINDS


def child_items(node: LazyNode, seen: set[int]) -> Iterator[tuple[TreePath, LazyNode] | LazyNode]:
    """What :func:`walk_leaves` walks by default: the children of ``node`` (``children()``),
    each leaf as ``(path, leaf)`` and each container as itself (to descend into)."""
    for _, child in node.children():
        yield child if is_container(child) else (child.path, child)


def walk_leaves(
    root: LazyNode,
    budget: int,
    items: Callable[[Any, set[int]], Iterator[Any] | LeafRun] = child_items,
    source: Closable | None = None,
) -> Iterator[tuple[TreePath, LazyNode]]:
    """``(path, node)`` of every leaf at or below ``root``, in order (pre-order, children in
    their order): what ``node.leaves()`` gives, for any reader's nodes.

    A leaf is a node that is neither a container nor a group (an array, a number, a string, a
    symbol, a singleton such as ``nothing`` or ``()``); a container with no children (a
    NamedTuple with no fields, an empty Dict) has none. Each container object
    (``object_address``) is descended into once, as ``inspect`` lists it: a later place holding
    the same object (shared, or a cycle) adds nothing, while an array shared by two places is a
    leaf at both.

    ``items(container, seen)`` gives a container's children as :func:`child_items` does (a reader
    may give them faster, or as a :class:`LeafRun` when they are all leaves). ``seen`` holds
    the addresses of the containers met so far: a container whose children ``items`` lists
    itself is added there by it, and given only to be counted. ``source``: the open file the
    nodes read from; once it is closed, the next leaf raises what its ``_check_open()`` raises
    (ValueError), not a node that cannot be read.

    Raises:
        LimitError: more than ``budget`` nodes visited (the file's ``Limits.max_nodes``: a
            hostile file sharing leaves at every level of a deep structure cannot make the
            listing endless).

    Example:
        >>> import os, tempfile, numpy as np
        >>> import treexchange
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2), b=(1, treexchange.NamedTuple(c="x")))
        >>> with treexchange.open(path) as f:
        ...     [(p, node.kind) for p, node in walk_leaves(f, 100)]
        [(('a',), 'array'), (('b', 1), 'number'), (('b', 2, 'c'), 'string')]
    """
    if not is_container(root):
        yield root.path, root
        return
    seen: set[int] = set()
    visited = 0
    stack: list[Iterator[Any]] = []
    node: LazyNode | None = root
    while True:
        if node is not None:  # a container to descend into, unless met before
            address = node.object_address
            if address is None or address not in seen:
                if address is not None:
                    seen.add(address)
                children = items(node, seen)
                if type(children) is not LeafRun:
                    stack.append(children)  # type: ignore[arg-type]
                elif visited + children.count <= budget:
                    visited += children.count
                    yield from children.leaves
                else:  # one by one: the limit raises at the leaf past it
                    stack.append(children.leaves)
            node = None
        if not stack:
            return
        for item in stack[-1]:
            visited += 1
            if visited > budget:
                raise LimitError(
                    f"more than {budget} nodes to list (objects shared many times over?)",
                    path=item[0] if type(item) is tuple else item.path,
                )
            if type(item) is tuple:
                # (an attribute looked at, not a call: this runs once per leaf)
                if source is not None and source.closed:
                    source._check_open()
                yield item
            elif item.object_address not in seen:  # (a container met before adds nothing)
                node = item
                break
        else:
            stack.pop()
