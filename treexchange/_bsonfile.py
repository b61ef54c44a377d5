"""BSON.jl files behind the node protocol: :class:`BsonFile` (what ``treexchange.open`` returns
for a ``.bson`` file) and its nodes.

Reading is lazy per top-level name: opening indexes the root document's names and the
``_backrefs`` array (their byte ranges, nothing inside them); ``f["model"]`` reads that entry's
value (arrays are zero-copy views of the file's copy-on-write map) in the file's one session, so
that a value shared between entries (a BSON.jl backref) is one Python object. Nodes are views
of the values read (:class:`treexchange._plainhdf5.ValueNode`), with two additions: a
container reached through a backref has an ``object_address`` (its backref index: ``inspect``
lists it once and points back to it elsewhere), and a node where the reader changed something
(a Tracker array read as its data) carries a ``note``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._bson import BsonDocument, Session
from ._errors import LimitError, TreePath
from ._gc import gc_paused
from ._jld2._nodes import array_protocol
from ._limits import DEFAULT_LIMITS, Limits
from ._nodeproto import CONTAINER_KINDS, walk_leaves
from ._plainhdf5 import HeaderlessRoot, ValueNode
from ._recursion import stack_for_depth
from ._typeof import SharedTypes, kind_of, wide_int_array


class BsonNode(ValueNode):
    """A node of a BSON.jl file: a view of a value already read (see the module docstring)."""

    def __init__(self, value: Any, path: TreePath, context: _Context) -> None:
        # ValueNode's own __init__ types the value alone; a file's nodes share one cache of
        # types (a DAG of backrefs is typed once per object).
        self._value = value
        self.path = path
        self.kind = kind_of(value, path=path)
        if self.kind in CONTAINER_KINDS:  # typed recursively: room for the deepest tree admitted
            try:
                with stack_for_depth(context.session.limits.max_depth):
                    self.julia_type = context.types.of(value, path)
            except RecursionError as err:
                raise LimitError("structure nested too deeply for Python's stack", path=path) from err
        else:
            self.julia_type = context.types.of(value, path)
        self._context = context
        # A value BSON.jl stored once and referred to from several places: its backref index.
        self.object_address = context.session.shared.get(id(value))
        # What the reader did here, if anything (``inspect`` shows it).
        self.note = context.session.notes.get(tuple(path))
        # An Int128 / UInt128 array (a JuliaArray of the numbers): an array of 16-byte elements,
        # as the JLD2 node of the same value presents it (``diff`` of the two then agrees)
        self._wide = wide_int_array(value) if self.kind == "vector" else None
        if self._wide is not None:
            self.kind = "array"

    @property
    def dtype(self) -> np.dtype | None:
        """As :attr:`ValueNode.dtype` (an ``Int128`` / ``UInt128`` / ``BigInt`` scalar has none,
        whatever its size, by its Julia type), but an Int128 array's is its 16-byte labelled dtype,
        as for the JLD2 node of the same value."""
        if self._wide is not None:
            return self._wide.dtype
        return super().dtype

    def _items(self) -> list[tuple[Any, Any, Any]]:
        return [] if self._wide is not None else super()._items()  # an array: numbers, not children

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if self._wide is not None:
            return array_protocol(self._wide, dtype, copy)
        return super().__array__(dtype, copy)

    def _child(self, value: Any, path: TreePath) -> BsonNode:
        return BsonNode(value, path, self._context)

    def _node_budget(self) -> int:
        return self._context.session.limits.nodes_for(self._context.session.parser.size)


@dataclass(frozen=True)
class _Context:
    """What the nodes of one open file share: the reading session and the cache of types."""

    session: Session
    types: SharedTypes


class BsonFile(Mapping[str, BsonNode], HeaderlessRoot):
    """A BSON.jl file opened for reading: a mapping of its top-level names to nodes.

    Mirrors :class:`treexchange.File`: ``read``, ``attrs`` (always empty), ``close``; ``format_version``
    is ``"BSON"`` and ``producer``/``header`` are empty (BSON files carry neither).

    Example:
        >>> import treexchange
        >>> from treexchange._bson._writer import bson_file
        >>> f = treexchange.open(bson_file({"acc": 0.98}))
        >>> f, list(f), f["acc"].kind, f.read("acc")
        (<treexchange BsonFile '<bytes>' (BSON.jl, 1 names)>, ['acc'], 'number', np.float64(0.98))
    """

    format_version = "BSON"

    def __init__(self, source: str | os.PathLike[str] | bytes, *, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._doc = BsonDocument(source, limits=limits)
        self.filename = self._doc.name
        self.file_size = self._doc.size
        self._session = self._doc.session()
        self._context = _Context(self._session, SharedTypes())
        self._values: dict[str, Any] = {}
        self.closed = False

    @property
    def attrs(self) -> dict[str, Any]:
        """``{}``: a BSON file has no attributes (so no embedded schema)."""
        return {}

    @property
    def notes(self) -> dict[TreePath, str]:
        """What the reader changed, by tree path, for the entries read so far."""
        return dict(self._session.notes)

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("I/O operation on a closed treexchange BsonFile")

    def _value(self, name: str) -> Any:
        self._check_open()
        if name not in self._values:
            self._values[name] = read_entry_value(self._doc, self._session, name)
        return self._values[name]

    def __getitem__(self, key: str) -> BsonNode:
        if not isinstance(key, str) or key not in self._doc.entries:
            raise KeyError(key)
        return BsonNode(self._value(key), (key,), self._context)

    def __iter__(self) -> Iterator[str]:
        return iter(self._doc.entries)

    def __len__(self) -> int:
        return len(self._doc.entries)

    def children(self) -> Iterator[tuple[str, BsonNode]]:
        for k in self._doc.entries:
            yield k, self[k]

    def leaves(self) -> Iterator[tuple[TreePath, Any]]:
        """``(path, node)`` of every leaf of every entry, in order (:func:`walk_leaves`)."""
        return walk_leaves(self, self.limits.nodes_for(self.file_size))

    def read(self, name: str | None = None, *, order: str = "julia", mmap: bool = True) -> Any:
        """Everything (``dict`` of top-level names) or one name. ``order="storage"`` and
        ``mmap=False`` read again in a session of their own (arrays reversed / copied)."""
        self._check_open()
        if order == "julia" and mmap:
            if name is not None:
                return self[name].read()
            return {k: self._value(k) for k in self._doc.entries}
        session = self._doc.session(order=order, mmap=mmap)
        names = list(self._doc.entries) if name is None else [name]
        for k in names:
            if k not in self._doc.entries:
                raise KeyError(k)
        values = {k: read_entry_value(self._doc, session, k) for k in names}
        return values if name is None else values[name]

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._values.clear()
            self._doc.close()

    def __repr__(self) -> str:
        return f"<treexchange BsonFile {self.filename!r} (BSON.jl, {len(self)} names)>"


def read_entry_value(doc: BsonDocument, session: Session, name: str) -> Any:
    """The value of top-level ``name``, read in ``session`` with room on the stack for the
    deepest tree the limits admit."""
    try:  # thousands of raw documents made and dropped, values kept: nothing for the collector
        with stack_for_depth(doc.limits.max_depth), gc_paused():
            return doc.read(session, name)
    except RecursionError as err:
        raise LimitError("structure nested too deeply for Python's stack", path=(name,)) from err
