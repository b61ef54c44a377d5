"""Infer a schema document from a file, an opened file, a value tree or a PyTree."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .._errors import LimitError
from ._model import (
    MAX_TREE_DEPTH,
    ArrayNode,
    BoolNode,
    DictNode,
    GroupNode,
    NamedField,
    NamedTupleNode,
    Node,
    NumberNode,
    Producer,
    Schema,
    SingletonNode,
    StringNode,
    StructNode,
    SymbolNode,
    TupleNode,
    VectorNode,
)
from ._scalars import to_json_value
from ._sources import FileSource, Source, is_file_like, roots_of

# Node classes are built with ``model_construct`` (no re-validation): every value put in them here
# is already of the right type, and validating 20,000 leaves one by one would dominate the time.
_VECTOR_OF_ANY = "Array{Any, 1}"


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
        checksums: add each array's sha256 (reads every array; otherwise no array data is read).
        values: pin every number / bool / string / symbol to its current value (``enum``).
        description: text for the document's ``description``.

    Example:
        >>> import numpy as np
        >>> from treexchange import NamedTuple
        >>> state = NamedTuple(weight=np.zeros((5, 16), np.float32), bias=np.zeros(5, np.float32), σ=())
        >>> doc = infer_schema({"model_state": state})
        >>> [(f.name, f.node.summary()) for f in doc.roots["model_state"].fields]
        [('weight', 'array float32 (5, 16)'), ('bias', 'array float32 (5,)'), ('σ', '()')]
    """
    options = _Options(checksums=checksums, values=values)
    if is_file_like(x):
        with _opened(x) as file:
            roots = _file_roots(file, name)
            producer = _file_producer(file, x)
            result = {key: options.node(src, 1) for key, src in roots}
    else:
        roots = roots_of(x, name=name)
        producer = Producer(version=_version(), source="values")
        result = {key: options.node(src, 1) for key, src in roots}
    return Schema(producer=producer, description=description, roots=result)


def infer_node(source: Source, *, checksums: bool = False, values: bool = False) -> Node:
    """The schema node of one source node (used for messages and alignment)."""
    return _Options(checksums=checksums, values=values).node(source, 1)


class _Options:
    __slots__ = ("checksums", "max_depth", "values")

    def __init__(self, *, checksums: bool, values: bool) -> None:
        self.checksums = checksums
        self.values = values
        self.max_depth = MAX_TREE_DEPTH

    def node(self, src: Source, depth: int) -> Node:
        if depth > self.max_depth:
            raise LimitError(
                f"tree deeper than {self.max_depth} levels, the most a schema document describes",
                path=src.path,
            )
        kind = src.kind
        if kind == "array":
            sha = src.sha256() if self.checksums else None
            return ArrayNode.model_construct(dtype=src.dtype(), shape=list(src.shape() or ()), sha256=sha)
        if kind == "namedtuple" or kind == "struct":
            fields = []
            for seg, child in src.children():
                fields.append(NamedField.model_construct(name=str(seg), node=self.node(child, depth + 1)))
            if kind == "struct":
                return StructNode.model_construct(type=src.type_text() or "Any", fields=fields)
            return NamedTupleNode.model_construct(fields=fields)
        if kind == "tuple" or kind == "vector":
            items = []
            for _, child in src.children():
                items.append(self.node(child, depth + 1))
            if kind == "tuple":
                return TupleNode.model_construct(items=items)
            vtype = src.type_text()
            return VectorNode.model_construct(items=items, type=None if vtype == _VECTOR_OF_ANY else vtype)
        if kind == "dict" or kind == "group":
            entries: dict[str, Node] = {}
            for seg, child in src.children():
                entries[str(seg)] = self.node(child, depth + 1)
            if kind == "group":
                return GroupNode.model_construct(entries=entries)
            return DictNode.model_construct(type=src.type_text(), entries=entries)
        if kind == "singleton":
            return SingletonNode.model_construct(type=src.type_text() or "Tuple{}")
        if kind == "number":
            enum = [to_json_value(src.scalar())] if self.values else None
            return NumberNode.model_construct(dtype=src.dtype(), type=src.type_text(), enum=enum)
        if kind == "bool":
            return BoolNode.model_construct(enum=[bool(src.scalar())] if self.values else None)
        if kind == "string":
            return StringNode.model_construct(enum=[str(src.scalar())] if self.values else None)
        if kind == "symbol":
            return SymbolNode.model_construct(enum=[str(src.scalar())] if self.values else None)
        raise LimitError(f"unknown node kind {kind!r}", path=src.path)  # pragma: no cover


def _version() -> str:
    from .. import __version__

    return __version__


@contextmanager
def _opened(x: Any) -> Iterator[Any]:
    """An opened file for a path (closed afterwards), or ``x`` itself when it is already open."""
    if isinstance(x, (str, os.PathLike)):
        from .._file import File  # the reader; imported late (it is a sibling layer)

        with File(x) as file:
            yield file
    else:
        yield x


def _file_roots(file: Any, name: str | None) -> list[tuple[str, Source]]:
    if name is None:
        return [(str(key), FileSource(file[key], (str(key),))) for key in file]
    parts = name.strip("/").split("/")
    src: Source = FileSource(file[name], tuple(parts))
    from ._sources import GroupSource

    for i in range(len(parts) - 1, 0, -1):
        src = GroupSource([(parts[i], src)], tuple(parts[:i]))
    return [(parts[0], src)]


def _file_producer(file: Any, x: Any) -> Producer:
    path = x if isinstance(x, (str, os.PathLike)) else getattr(file, "filename", None)
    source = os.path.basename(os.fspath(path)) if path is not None else None
    producer = getattr(file, "producer", None)
    fmt = getattr(file, "format_version", None)
    return Producer(
        version=_version(),
        source=source,
        julia=str(producer).strip() if producer else None,
        format=str(fmt) if fmt else None,
    )
