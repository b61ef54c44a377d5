"""Infer a schema document from a file, an opened file, a value tree or a PyTree."""

from __future__ import annotations

import os
from typing import Any, TypeVar

from pydantic import BaseModel

from .._errors import LimitError
from .._gc import gc_paused
from .._inspect import node_budget
from .._jsonform import json_scalar
from .._limits import DEFAULT_LIMITS, Limits
from .._nodeproto import LazyFile
from .._recursion import stack_for_depth
from .._values import JuliaBits
from .._version import __version__
from ._content import content_value
from ._model import (
    ArrayNode,
    BoolNode,
    DictNode,
    GroupNode,
    NamedField,
    NamedTupleNode,
    Node,
    NumberNode,
    Producer,
    RefNode,
    Schema,
    SingletonNode,
    StringNode,
    StructNode,
    SymbolNode,
    TupleNode,
    VectorNode,
)
from ._sources import Source, file_roots, is_file_like, opened, roots_of, with_bridge

_VECTOR_OF_ANY = "Array{Any, 1}"
_PLAIN_NODES: dict[str, type[BoolNode | StringNode | SymbolNode]] = {
    "bool": BoolNode,
    "string": StringNode,
    "symbol": SymbolNode,
}
_M = TypeVar("_M", bound=BaseModel)


def _make(cls: type[_M], **values: Any) -> _M:
    """An instance of a schema model without validation, like ``cls.model_construct`` but quicker.

    Every value given here is already of the declared type (it was just computed from the tree),
    and constructing 20,000 leaves through validation, or through ``model_construct``'s generic
    per-field loop, would dominate the time of inferring a large file. Fields not given take
    their defaults, which in these models are ``None``, the literal ``kind`` or ``[]``.

    Every instance of a class shares one ``__pydantic_fields_set__`` holding all its field
    names (a document made by inference sets every field, defaults included). A set of its own
    per node would be one more object for the cyclic garbage collector per node, some 70,000
    for a 20,000-leaf file. Sharing is safe: pydantic adds the name of an assigned field to the
    set, a no-op for a set holding every field name; unknown names are refused
    (``extra="forbid"``) and copies get a set of their own.
    """
    obj = cls.__new__(cls)
    _set_dict(obj, _DEFAULTS[cls] | values)
    _set_fields_set(obj, _ALL_FIELDS[cls])
    _set_extra(obj, None)
    _set_private(obj, None)
    return obj


_DEFAULTS: dict[type[BaseModel], dict[str, Any]] = {
    cls: {name: field.get_default(call_default_factory=True) for name, field in cls.model_fields.items()}
    for cls in (
        ArrayNode,
        BoolNode,
        DictNode,
        GroupNode,
        NamedField,
        NamedTupleNode,
        NumberNode,
        RefNode,
        SingletonNode,
        StringNode,
        StructNode,
        SymbolNode,
        TupleNode,
        VectorNode,
        Schema,
    )
}
_ALL_FIELDS: dict[type[BaseModel], set[str]] = {cls: set(defaults) for cls, defaults in _DEFAULTS.items()}
# The slot setters of BaseModel (what object.__setattr__ would find, looked up once).
_set_dict = vars(BaseModel)["__dict__"].__set__
_set_fields_set = vars(BaseModel)["__pydantic_fields_set__"].__set__
_set_extra = vars(BaseModel)["__pydantic_extra__"].__set__
_set_private = vars(BaseModel)["__pydantic_private__"].__set__


def infer_schema(
    x: Any,
    *,
    name: str | None = None,
    checksums: bool = False,
    values: bool = False,
    description: str | None = None,
) -> Schema:
    """The schema of ``x``: a file path, an opened file (``treexchange.open``), a value tree or a PyTree.

    Args:
        x: what to describe. A ``dict`` with ``str`` keys is a mapping of top-level names (as
            ``treexchange.load(path)`` returns); any other value is one root named ``name`` (default
            ``"model_state"``). PyTrees (Equinox modules, dataclasses ...) go through the JAX bridge.
        name: describe only this top-level name (``"a/b"`` reaches into groups).
        checksums: record contents: each array's sha256 and each number's, bool's, string's and
            symbol's exact ``value`` (reads every array; otherwise no array data is read).
        values: pin every number / bool / string / symbol to its current value (``enum``).
        description: text for the document's ``description``.

    Example:
        >>> from treexchange import infer_schema
        >>> import numpy as np
        >>> from treexchange import NamedTuple
        >>> state = NamedTuple(weight=np.zeros((5, 16), np.float32), bias=np.zeros(5, np.float32), σ=())
        >>> doc = infer_schema({"model_state": state})
        >>> [(f.name, f.node.summary()) for f in doc.roots["model_state"].fields]
        [('weight', 'array float32 (5, 16)'), ('bias', 'array float32 (5,)'), ('σ', '()')]
    """
    return _infer(x, _Options(checksums=checksums, values=values), name=name, description=description)


def infer_with_sizes(
    x: Any, *, name: str | None = None, checksums: bool = False
) -> tuple[Schema, dict[int, int]]:
    """:func:`infer_schema`, and the byte count of each value of a Julia bits type with no numpy
    dtype (a :class:`~treexchange.JuliaBits`: a ``Char``, an ``@enum``, a pointer) by the ``id`` of
    its number node (while the schema lives). The schema records such a value as the integer its
    bytes make; ``diff`` shows it as ``inspect`` does, in hex of that many bytes.

    Example:
        >>> from treexchange import JuliaBits
        >>> doc, sizes = infer_with_sizes({"e": JuliaBits("Main.E", b"\\x02\\x00")}, checksums=True)
        >>> doc.roots["e"].value, sizes[id(doc.roots["e"])]
        (2, 2)
    """
    options = _Options(checksums=checksums, values=False)
    options.sizes = {}
    return _infer(x, options, name=name, description=None), options.sizes


def _infer(x: Any, options: _Options, *, name: str | None, description: str | None) -> Schema:
    with gc_paused():
        if is_file_like(x):
            with opened(x) as file:
                roots = file_roots(file, name)
                producer = _file_producer(file, x)
                options.budget = node_budget(file)
                limits = file_limits(file)
                options.max_depth = limits.max_schema_depth
                # The walk recurses once per level: room on the stack for the deepest tree both
                # the reader and the schema admit (a raised max_schema_depth met a bare
                # RecursionError in a BSON.jl file 480 deep).
                with stack_for_depth(min(limits.max_schema_depth, limits.max_depth)):
                    result = {key: options.node(src, 1) for key, src in roots}
            # Let the lazy nodes go while the collector is still paused: when it resumes, it
            # scans everything made meanwhile that is still alive once (for a path, the file's
            # whole node tree would be about half of it, for nothing).
            del roots, file
        else:
            roots = roots_of(x, name=name)
            producer = Producer(version=_version(), source="values")
            result = with_bridge(roots, lambda rs: {key: options.node(src, 1) for key, src in rs})
    # Built without validation: every node is well-formed by construction, and no deeper than
    # Limits.max_schema_depth (checked while walking).
    return _make(Schema, producer=producer, description=description, roots=result)


def file_limits(file: Any) -> Limits:
    """The :class:`Limits` an opened file was opened with (``DEFAULT_LIMITS`` when it has none)."""
    limits = getattr(getattr(file, "reader", None), "limits", None) or getattr(file, "limits", None)
    return limits if isinstance(limits, Limits) else DEFAULT_LIMITS


def infer_node(source: Source, *, checksums: bool = False, values: bool = False) -> Node:
    """The schema node of one source node (used for messages and alignment)."""
    return _Options(checksums=checksums, values=values).node(source, 1)


_SHARED_KINDS = frozenset({"vector", "dict", "group", "struct"})
"""Kinds whose objects can be mutable in Julia (``Vector``, ``Dict``, mutable structs, groups):
one of them reached twice is *shared* (a change through one place shows at the other), which a
schema says with a ``ref``. A NamedTuple or Tuple reached twice is immutable: identity is not
observable, and its node is simply described again."""


class _Options:
    """One inference: options, and the objects met so far. An object on the current path met
    again is a cycle, and a mutable object met again is shared: both become a ``ref`` node to the
    place where it was first described. Other objects a file's DAG reaches twice are inferred
    once, their schema node reused at every other place."""

    __slots__ = (
        "_active",
        "_deepest",
        "_memo",
        "budget",
        "checksums",
        "count",
        "max_depth",
        "sizes",
        "values",
    )

    def __init__(self, *, checksums: bool, values: bool) -> None:
        self.checksums = checksums
        self.values = values
        self.max_depth = DEFAULT_LIMITS.max_schema_depth  # an opened file's own, when it has one
        self.budget: int | None = None  # Limits.max_nodes for the file (derived from its size)
        self.count = 0  # schema nodes described, reused subtrees counted in full
        # address -> (node, size, height, path where it was described)
        self._memo: dict[int, tuple[Node, int, int, tuple[Any, ...]]] = {}
        self._active: dict[int, tuple[Any, ...]] = {}  # containers on the current path
        self._deepest = 0
        self.sizes: dict[int, int] | None = None  # (infer_with_sizes: bits values' byte counts)

    def node(self, src: Source, depth: int) -> Node:
        if depth > self.max_depth:
            raise LimitError(
                f"tree deeper than {self.max_depth} levels, the most a schema document describes",
                path=src.path,
            )
        address = src.object_address()
        if address is None:
            self._charge(1, src)
            self._deepest = max(self._deepest, depth)
            return self._build(src, depth)
        back = self._active.get(address)
        if back is not None:  # a cycle: the object of an enclosing place again
            return self._ref(back, src, depth)
        hit = self._memo.get(address)
        if hit is not None:
            node, size, height, first = hit
            if src.kind in _SHARED_KINDS:
                return self._ref(first, src, depth)
            if depth + height > self.max_depth:
                raise LimitError(
                    f"tree deeper than {self.max_depth} levels, the most a schema document describes",
                    path=src.path,
                )
            self._charge(size, src)
            self._deepest = max(self._deepest, depth + height)
            return node
        before_count, before_deepest = self.count, self._deepest
        self._deepest = depth
        self._active[address] = src.path
        try:
            self._charge(1, src)
            node = self._build(src, depth)
        finally:
            del self._active[address]
        height = self._deepest - depth
        self._memo[address] = (node, self.count - before_count, height, src.path)
        self._deepest = max(before_deepest, self._deepest)
        return node

    def _ref(self, target: tuple[Any, ...], src: Source, depth: int) -> Node:
        self._charge(1, src)
        self._deepest = max(self._deepest, depth)
        return _make(RefNode, target=[seg if isinstance(seg, (str, int)) else str(seg) for seg in target])

    def _charge(self, n: int, src: Source) -> None:
        self.count += n
        if self.budget is not None and self.count > self.budget:
            raise LimitError(
                f"schema of more than max_nodes={self.budget} nodes (objects shared many times over?)",
                path=src.path,
            )

    def _build(self, src: Source, depth: int) -> Node:
        kind = src.kind
        if kind == "array":
            sha = src.sha256() if self.checksums else None
            shape = src.shape()
            return _make(ArrayNode, dtype=src.dtype(), shape=list(shape) if shape else [], sha256=sha)
        if kind == "namedtuple" or kind == "struct":
            fields = []
            for seg, child in src.children():
                fields.append(_make(NamedField, name=str(seg), node=self.node(child, depth + 1)))
            if kind == "struct":
                return _make(StructNode, type=src.type_text() or "Any", fields=fields)
            return _make(NamedTupleNode, fields=fields)
        if kind == "tuple" or kind == "vector":
            items = []
            for _, child in src.children():
                items.append(self.node(child, depth + 1))
            if kind == "tuple":
                return _make(TupleNode, items=items)
            vtype = src.type_text()
            return _make(VectorNode, items=items, type=None if vtype == _VECTOR_OF_ANY else vtype)
        if kind == "dict" or kind == "group":
            entries: dict[str, Node] = {}
            for seg, child in src.children():
                entries[str(seg)] = self.node(child, depth + 1)
            if kind == "group":
                return _make(GroupNode, entries=entries)
            return _make(DictNode, type=src.type_text(), entries=entries)
        if kind == "singleton":
            return _make(SingletonNode, type=src.type_text() or "Tuple{}")
        if kind == "number":
            type_text = src.type_text()
            if not (self.values or self.checksums):
                return _make(NumberNode, dtype=src.dtype(), type=type_text)
            number = src.scalar()
            enum = [json_scalar(number, type_text)] if self.values else None
            value = content_value(number, type_text) if self.checksums else None
            node = _make(NumberNode, dtype=src.dtype(), type=type_text, enum=enum, value=value)
            if self.sizes is not None and isinstance(number, JuliaBits):
                self.sizes[id(node)] = len(number.data)
            return node
        if kind in _PLAIN_NODES:
            cls = _PLAIN_NODES[kind]
            if not (self.values or self.checksums):
                return _make(cls)
            plain = bool(src.scalar()) if kind == "bool" else str(src.scalar())
            return _make(cls, enum=[plain] if self.values else None, value=plain if self.checksums else None)
        raise LimitError(f"unknown node kind {kind!r}", path=src.path)  # pragma: no cover


def _version() -> str:
    return __version__


def _file_producer(file: LazyFile, x: Any) -> Producer:
    path = x if isinstance(x, (str, os.PathLike)) else file.filename
    producer, fmt = file.producer, file.format_version
    return Producer(
        version=_version(),
        source=os.path.basename(os.fspath(path)),
        julia=producer.strip() if producer else None,
        format=fmt or None,
    )
