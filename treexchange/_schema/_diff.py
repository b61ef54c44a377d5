"""Differences between two schemas (or two files, value trees, PyTrees: their inferred schemas)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._bson import sniff as sniff_bson
from .._errors import TreePath, clip_type, format_path
from .._limits import DEFAULT_LIMITS, Limits
from ._align import align
from ._content import bits_shown, same_content, shown_value
from ._infer import infer_with_sizes
from ._model import (
    ArrayNode,
    DictNode,
    GroupNode,
    NamedTupleNode,
    Node,
    NumberNode,
    RefNode,
    Schema,
    SingletonNode,
    StructNode,
    TupleNode,
    VectorNode,
    format_shape,
    path_key,
)
from ._scalars import format_value
from ._versions import load_schema

_SYMBOL = {"added": "+", "removed": "-"}


@dataclass(frozen=True)
class Difference:
    """One difference: what changed (``kind``), where (``path``), the two sides (JSON-ready), and
    a readable ``message``.

    ``kind`` is ``added`` / ``removed`` (a node only in B / only in A), ``kind``, ``type``,
    ``order``, ``dtype``, ``shape``, ``checksum`` (an array's sha256), ``content`` (a scalar's
    recorded value: a number, ``Bool``, ``String`` or ``Symbol``), ``value`` (value constraints),
    ``ref`` (a back-reference to another place) or ``description``.
    """

    kind: str
    path: TreePath
    a: Any
    b: Any
    message: str
    short: str | None = None  # the message with long Julia types shortened, when it names any

    def __str__(self) -> str:
        return self.text()

    def text(self, *, full_types: bool = False) -> str:
        """The one-line report; long Julia types shortened unless ``full_types``."""
        message = self.message if full_types or self.short is None else self.short
        return f"{_SYMBOL.get(self.kind, '~')} {format_path(self.path)}: {message}"

    def to_json(self) -> dict[str, Any]:
        """``{"kind", "path", "a", "b", "message"}``."""
        return {"kind": self.kind, "path": list(self.path), "a": self.a, "b": self.b, "message": self.message}


class SchemaDiff:
    """The differences between schema A and schema B, in pre-order.

    Falsy when the two are the same. ``text()`` is for humans (one line per difference, ``-`` only
    in A, ``+`` only in B, ``~`` changed), ``to_json()`` for programs.
    """

    def __init__(self, differences: list[Difference], *, a_label: str = "A", b_label: str = "B") -> None:
        self.differences = differences
        self.a_label = a_label
        self.b_label = b_label

    def __bool__(self) -> bool:
        return bool(self.differences)

    def __len__(self) -> int:
        return len(self.differences)

    def __iter__(self) -> Iterator[Difference]:
        return iter(self.differences)

    def __repr__(self) -> str:
        return f"SchemaDiff({len(self.differences)} difference(s))"

    def text(self, *, full_types: bool = False) -> str:
        """Readable report; says so when there is no difference. Julia types longer than 100
        characters are shortened with "…" (as ``inspect`` does) unless ``full_types``."""
        head = f"--- {self.a_label}\n+++ {self.b_label}\n"
        if not self.differences:
            return head + "no differences\n"
        return head + "".join(f"{d.text(full_types=full_types)}\n" for d in self.differences)

    def to_json(self) -> dict[str, Any]:
        """``{"a", "b", "equal", "differences": [...]}``, JSON-ready."""
        return {
            "a": self.a_label,
            "b": self.b_label,
            "equal": not self.differences,
            "differences": [d.to_json() for d in self.differences],
        }


def _zero_size_twins(a: Node, b: Node) -> bool:
    """A struct whose fields are all zero-size (``ByRow{typeof(f)}`` holding the function; a
    ``Chain`` whose tuple holds field-less structs only) and the singleton of the same type: one
    Julia value, which BSON.jl stores with its fields and JLD2 as the type alone (``values_equal``
    agrees). Tuples and NamedTuples of zero-size values are zero-size too, as in Julia."""
    pair = (a, b) if isinstance(a, StructNode) else (b, a)
    struct, single = pair
    if not (isinstance(struct, StructNode) and isinstance(single, SingletonNode)):
        return False
    if struct.type != single.type:
        return False
    todo: list[Node] = [f.node for f in struct.fields]
    while todo:
        node = todo.pop()
        if isinstance(node, (StructNode, NamedTupleNode, TupleNode)):
            todo.extend(child for _, child in node.children())
        elif not isinstance(node, SingletonNode):
            return False
    return True


def diff(a: Any, b: Any, *, checksums: bool = False, name: str | None = None) -> SchemaDiff:
    """Compare two schemas; files, value trees and PyTrees are compared through their inferred schemas.

    Without ``checksums`` the comparison is of structure: names, kinds, types, field order, dtypes,
    shapes (and whatever contents schema documents given as ``a`` / ``b`` record). With
    ``checksums`` it is of contents too: every array's sha256 (``checksum``) and every number's,
    ``Bool``'s, ``String``'s and ``Symbol``'s exact value (``content``; NaNs by their bits, ``-0.0``
    is not ``0.0``); zero-size values (``()``, ``nothing``, activation functions) are their type.

    Args:
        a: a :class:`treexchange.Schema`, a schema JSON file or text, JSON data with a
            ``schema_version``, a JLD2 or BSON.jl file path or opened file, a value tree or a PyTree.
        b: the other side, any of the same.
        checksums: when inferring from data, record contents (array sha256s, scalar values), so
            that changed contents show.
        name: compare only this top-level name.

    Example:
        >>> from treexchange import diff
        >>> import numpy as np
        >>> from treexchange import NamedTuple
        >>> old = {"m": NamedTuple(weight=np.zeros((5, 16), np.float32), bias=np.zeros(5, np.float32))}
        >>> new = {"m": NamedTuple(weight=np.zeros((5, 32), np.float32))}
        >>> print(diff(old, new).text(), end="")
        --- A
        +++ B
        ~ m.weight: shape (5, 16) -> (5, 32)
        - m.bias: removed (array float32 (5,))
        >>> print(diff({"lr": 0.1, "act": "relu"}, {"lr": 0.2, "act": "relu"}, checksums=True).text(), end="")
        --- A
        +++ B
        ~ lr: content 0.1 -> 0.2
    """
    doc_a, label_a, sizes = _as_schema(a, checksums=checksums, name=name, default="A")
    doc_b, label_b, sizes_b = _as_schema(b, checksums=checksums, name=name, default="B")
    out: list[Difference] = []
    _Differ(out, DEFAULT_LIMITS, sizes | sizes_b).documents(doc_a, doc_b, name)
    return SchemaDiff(out, a_label=label_a, b_label=label_b)


def _looks_like_json_file(path: Path) -> bool:
    """Whether ``path`` is a schema document (JSON text starting with ``{``), not a data file.

    A BSON.jl file starts with its length as a little-endian int32, whose low byte is ``{`` (0x7b)
    in one file size of 256: such a file is told apart by the rest of that length (the file's
    size) and its closing NUL, which no JSON text has (:func:`~treexchange._bson.sniff`).
    """
    try:
        with path.open("rb") as f:
            head = f.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return False
    return head.startswith(b"{") and not sniff_bson(path)


def _as_schema(
    x: Any, *, checksums: bool, name: str | None, default: str
) -> tuple[Schema, str, dict[int, int]]:
    """The schema of one side, its label, and the byte count of its bits values by node id
    (:func:`infer_with_sizes`; none for a schema document, which records no widths)."""
    if isinstance(x, Schema):
        return x, default, {}
    if isinstance(x, Mapping) and isinstance(x.get("schema_version", x.get("format_version")), str):
        return load_schema(x), default, {}
    if isinstance(x, str) and x.lstrip().startswith("{"):
        return load_schema(x), default, {}
    if isinstance(x, (str, os.PathLike)):
        path = Path(x)
        if _looks_like_json_file(path):
            return load_schema(path), str(x), {}
        doc, sizes = infer_with_sizes(path, checksums=checksums, name=name)
        return doc, str(x), sizes
    doc, sizes = infer_with_sizes(x, checksums=checksums, name=name)
    return doc, default, sizes


class _Differ:
    def __init__(self, out: list[Difference], limits: Limits, sizes: dict[int, int]) -> None:
        self.out = out
        self.limits = limits  # max_align_cells: how long a sequence is aligned, not paired by position
        self.sizes = sizes  # id of a number node -> byte count of the bits value it describes
        self._keys: dict[int, str] = {}

    def add(self, kind: str, path: TreePath, a: Any, b: Any, message: str) -> None:
        self.out.append(Difference(kind, path, a, b, message))

    def documents(self, a: Schema, b: Schema, name: str | None) -> None:
        top = None if name is None else name.split("/")[0]
        for key, node in a.roots.items():
            if top is not None and key != top:
                continue
            if key in b.roots:
                self.node(node, b.roots[key], (key,))
            else:
                self.removed((key,), node)
        for key, node in b.roots.items():
            if key not in a.roots and (top is None or key == top):
                self.added((key,), node)

    def removed(self, path: TreePath, node: Node) -> None:
        self.add("removed", path, _dump(node), None, f"removed ({node.summary()})")

    def added(self, path: TreePath, node: Node) -> None:
        self.add("added", path, None, _dump(node), f"added ({node.summary()})")

    def changed(self, kind: str, path: TreePath, a: Any, b: Any, shown_a: str, shown_b: str) -> None:
        self.add(kind, path, a, b, f"{kind} {shown_a} -> {shown_b}")

    def node(self, a: Node, b: Node, path: TreePath) -> None:
        if {a.kind, b.kind} == {"group", "dict"}:
            # ``load`` returns a file's groups as dicts: a schema inferred from loaded values says
            # "dict" where one inferred from the file says "group". Compare their entries.
            self.entries(a.entries, b.entries, path)  # type: ignore[union-attr]
            return
        if a.kind != b.kind:
            if _zero_size_twins(a, b):
                return  # (what values_equal says: the struct is the singleton of its type)
            self.changed("kind", path, a.kind, b.kind, a.summary(), b.summary())
            return
        if a.description != b.description:
            self.changed(
                "description", path, a.description, b.description, repr(a.description), repr(b.description)
            )
        if isinstance(a, (StructNode, SingletonNode, VectorNode, DictNode, NumberNode)):
            ta, tb = a.type, b.type  # type: ignore[union-attr]
            # An optional type left out (dicts and vectors inferred from Python values, whose
            # exact Julia type is not known) is "unspecified", not a change.
            optional = isinstance(a, (VectorNode, DictNode)) and (ta is None or tb is None)
            if ta != tb and not optional:
                short = f"type {clip_type(str(ta))} -> {clip_type(str(tb))}"
                self.out.append(Difference("type", path, ta, tb, f"type {ta} -> {tb}", short=short))
        if isinstance(a, (NamedTupleNode, StructNode)):
            self.fields(a, b, path)  # type: ignore[arg-type]
        elif isinstance(a, TupleNode):
            assert isinstance(b, TupleNode)
            self.items(a.items, b.items, path)
        elif isinstance(a, VectorNode):
            assert isinstance(b, VectorNode)
            self.vector(a, b, path)
        elif isinstance(a, (DictNode, GroupNode)):
            self.entries(a.entries, b.entries, path)  # type: ignore[union-attr]
        elif isinstance(a, ArrayNode):
            assert isinstance(b, ArrayNode)
            self.array(a, b, path)
        elif isinstance(a, RefNode):
            assert isinstance(b, RefNode)
            if path_key(a.target) != path_key(b.target):
                self.changed("ref", path, a.target, b.target, a.summary(), b.summary())
        else:
            self.constraints(a, b, path)

    def fields(self, a: NamedTupleNode | StructNode, b: NamedTupleNode | StructNode, path: TreePath) -> None:
        names_a, names_b = a.names, b.names
        set_a, set_b = set(names_a), set(names_b)
        common_a = [n for n in names_a if n in set_b]
        common_b = [n for n in names_b if n in set_a]
        if common_a != common_b:
            self.changed("order", path, names_a, names_b, _names(names_a), _names(names_b))
        b_fields = {f.name: f.node for f in b.fields}
        for f in a.fields:
            if f.name in b_fields:
                self.node(f.node, b_fields[f.name], (*path, f.name))
            else:
                self.removed((*path, f.name), f.node)
        for f in b.fields:
            if f.name not in set_a:
                self.added((*path, f.name), f.node)

    def items(self, a: list[Node], b: list[Node], path: TreePath) -> None:
        if len(a) == len(b):
            pairs: list[tuple[int | None, int | None]] = [(i, i) for i in range(len(a))]
        else:
            keys_a = [self.key(n) for n in a]
            keys_b = [self.key(n) for n in b]
            pairs = align(
                len(a), len(b), lambda i, j: keys_a[i] == keys_b[j], max_cells=self.limits.max_align_cells
            )
        for i, j in pairs:
            if i is not None and j is not None:
                self.node(a[i], b[j], (*path, j + 1))
            elif i is not None:
                self.removed((*path, i + 1), a[i])
            elif j is not None:
                self.added((*path, j + 1), b[j])

    def vector(self, a: VectorNode, b: VectorNode, path: TreePath) -> None:
        if a.items is not None and b.items is not None:
            self.items(a.items, b.items, path)
            return
        if a.element is not None and b.element is not None:
            if a.length != b.length:
                self.changed("shape", path, a.length, b.length, f"length {a.length}", f"length {b.length}")
            self.node(a.element, b.element, (*path, "*"))
            return
        self.changed("kind", path, _dump(a), _dump(b), a.summary(), b.summary())

    def entries(self, a: dict[str, Node], b: dict[str, Node], path: TreePath) -> None:
        for key, node in a.items():
            if key in b:
                self.node(node, b[key], (*path, key))
            else:
                self.removed((*path, key), node)
        for key, node in b.items():
            if key not in a:
                self.added((*path, key), node)

    def array(self, a: ArrayNode, b: ArrayNode, path: TreePath) -> None:
        if a.dtype != b.dtype:
            self.changed("dtype", path, a.dtype, b.dtype, str(a.dtype), str(b.dtype))
        if a.shape != b.shape:
            self.changed("shape", path, a.shape, b.shape, _shape(a.shape), _shape(b.shape))
        if a.sha256 != b.sha256:
            self.changed("checksum", path, a.sha256, b.sha256, _digest(a.sha256), _digest(b.sha256))

    def constraints(self, a: Node, b: Node, path: TreePath) -> None:
        if isinstance(a, NumberNode) and isinstance(b, NumberNode) and a.dtype != b.dtype:
            self.changed("dtype", path, a.dtype, b.dtype, str(a.dtype), str(b.dtype))
        number = isinstance(a, NumberNode)  # (b is one too: the kinds are equal here)
        # A bits value with no numpy dtype (Char, @enum, pointer: ``type`` names it) is recorded as
        # the integer its bytes make and shown as inspect shows it, at its byte count where known
        # (inferred here; a schema document's side takes the other side's).
        ta, tb = (getattr(n, "type", None) if number else None for n in (a, b))
        sa, sb = self.sizes.get(id(a)), self.sizes.get(id(b))
        sa, sb = sa or sb, sb or sa
        for attr in ("enum", "minimum", "maximum"):
            va, vb = getattr(a, attr, None), getattr(b, attr, None)
            if va != vb:
                self.changed("value", path, va, vb, f"{attr} {_value(va, ta, sa)}", _value(vb, tb, sb))
        # The recorded content (a number's, bool's, string's or symbol's exact value), like an
        # array's sha256: recorded on one side only is a difference too.
        ca, cb = getattr(a, "value", None), getattr(b, "value", None)
        if not same_content(ca, cb):
            self.changed(
                "content",
                path,
                ca,
                cb,
                shown_value(ca, number=number, julia_type=ta, size=sa),
                shown_value(cb, number=number, julia_type=tb, size=sb),
            )

    def key(self, node: Node) -> str:
        """A canonical text of a node without descriptions (for aligning items)."""
        cached = self._keys.get(id(node))
        if cached is None:
            cached = json.dumps(_strip_descriptions(_dump(node)), sort_keys=True)
            self._keys[id(node)] = cached
        return cached


def _dump(node: Node) -> Any:
    return node.model_dump(mode="json", exclude_none=True)


def _strip_descriptions(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _strip_descriptions(v) for k, v in data.items() if k != "description"}
    if isinstance(data, list):
        return [_strip_descriptions(v) for v in data]
    return data


def _names(names: list[str]) -> str:
    return f"({', '.join(names)})"


def _shape(shape: list[Any] | None) -> str:
    return "any" if shape is None else format_shape(shape)


def _digest(digest: str | None) -> str:
    return "none" if digest is None else f"{digest[:16]}…"


def _value(v: Any, julia_type: str | None = None, size: int | None = None) -> str:
    if v is None:
        return "none"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x, julia_type, size) for x in v) + "]"
    return bits_shown(v, julia_type, size) or format_value(v)
