"""The schema document format (version 2.1) as pydantic v2 models.

A schema document describes one state tree per top-level name (``roots``). Every node has a ``kind``
(the same kinds as ``treexchange inspect --json``, plus ``group`` for a nested JLD2/HDF5 group) and
an optional ``description``. The models are the single source of truth: the committed JSON Schema
(``schema/treexchange-schema.json``) is generated from them.

Ordered children (NamedTuple and struct fields) are JSON *lists* of ``{"name", "node"}`` pairs, not
JSON objects, because field order is part of a Julia NamedTuple's type and several JSON readers
(Julia's JSON.jl with its default ``Dict``, JavaScript for integer-like keys) do not keep object key
order. Unordered children (dict entries, group members, roots) are JSON objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from .._errors import TreePath, format_path
from .._gc import gc_paused
from .._limits import DEFAULT_LIMITS, Limits
from ._pretty import pretty_json

SCHEMA_VERSION = "2.1"
"""The schema document version this treexchange writes (and reads natively)."""


_DIM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SHA256 = r"^[0-9a-f]{64}$"

# A dimension: an exact size, a symbolic name that must bind to the same size everywhere in the
# document, or ``null`` (free).
Dim = Annotated[int, Field(ge=0)] | Annotated[str, Field(pattern=_DIM_NAME.pattern)] | None

# JSON encodings of scalar values (inspect's ``value`` convention): numbers; complex as
# ``[re, im]``; 128-bit integers as decimal strings; ``"NaN"``, ``"Infinity"``, ``"-Infinity"``.
NumberValue = int | float | str | Annotated[list[int | float | str], Field(min_length=2, max_length=2)]

_VALUE_HELP = (
    "The recorded content (2.1; written with checksums): the exact value in inspect's JSON encoding, "
    "a NaN other than the standard one as 'NaN(0x<bits>)'."
)


class _Base(BaseModel):
    """Shared configuration: unknown keys are errors (they are usually typos such as ``shpae``),
    except when a newer *minor* version is being read, which may add optional keys (see
    :func:`treexchange.load_schema`)."""

    model_config = ConfigDict(extra="forbid", frozen=False, validate_assignment=False)

    @model_validator(mode="before")
    @classmethod
    def _drop_unknown_for_newer_minor(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict) and info.context and info.context.get("ignore_unknown_keys"):
            known = set(cls.model_fields)
            return {k: v for k, v in data.items() if k in known}
        return data


def _kind_required(schema: dict[str, Any]) -> None:
    # ``kind`` has a default for Python callers, but a JSON document must always state it: it is
    # the discriminator.
    required = schema.setdefault("required", [])
    if "kind" not in required:
        required.insert(0, "kind")


class _NodeBase(_Base):
    model_config = ConfigDict(json_schema_extra=_kind_required)

    # Declared here so that ``kind`` comes first in every node's JSON (subclasses narrow it to a
    # Literal, which keeps this position).
    kind: str
    description: str | None = Field(default=None, description="Free text for humans.")

    def summary(self) -> str:
        """A one-line description used in messages (``array float32 (16, 1)``)."""
        return self.kind

    def children(self) -> Iterator[tuple[str | int, Node]]:
        """Child nodes with their path segments (in document order)."""
        return iter(())


class NamedField(_Base):
    """One named field of a NamedTuple or struct: its ``name`` and the ``node`` describing it."""

    name: str
    node: Node


class _FieldsMixin(_NodeBase):
    fields: list[NamedField] = Field(default_factory=list, description="Fields in order.")

    @field_validator("fields")
    @classmethod
    def _unique_names(cls, fields: list[NamedField]) -> list[NamedField]:
        seen: set[str] = set()
        for f in fields:
            if f.name in seen:
                raise ValueError(f"duplicate field name {f.name!r}")
            seen.add(f.name)
        return fields

    @property
    def names(self) -> list[str]:
        """Field names in order."""
        return [f.name for f in self.fields]

    def field(self, name: str) -> Node:
        """The node of field ``name`` (KeyError when absent)."""
        for f in self.fields:
            if f.name == name:
                return f.node
        raise KeyError(name)

    def children(self) -> Iterator[tuple[str | int, Node]]:
        return ((f.name, f.node) for f in self.fields)


class NamedTupleNode(_FieldsMixin):
    """A Julia ``NamedTuple``: named fields whose order is part of the type."""

    kind: Literal["namedtuple"] = "namedtuple"

    def summary(self) -> str:
        return f"namedtuple ({', '.join(self.names)})" if self.fields else "namedtuple ()"


class StructNode(_FieldsMixin):
    """Any other Julia struct: its type (as Julia prints it) and all its fields in order."""

    kind: Literal["struct"] = "struct"
    type: str = Field(description="The Julia type as Julia prints it, e.g. 'Flux.Dense{typeof(relu), ...}'.")

    def summary(self) -> str:
        return f"struct {self.type}"


class _ItemsMixin(_NodeBase):
    items: list[Node] | None = Field(
        default=None, description="One node per position (positions are 1-based in paths)."
    )

    def children(self) -> Iterator[tuple[str | int, Node]]:
        return ((i, n) for i, n in enumerate(self.items or (), start=1))


class TupleNode(_ItemsMixin):
    """A Julia ``Tuple`` (non-empty; ``()`` is a ``singleton`` of type ``Tuple{}``)."""

    kind: Literal["tuple"] = "tuple"
    items: list[Node] = Field(description="One node per position (positions are 1-based in paths).")

    def summary(self) -> str:
        return f"tuple of {len(self.items)}"


def _vector_json_schema(schema: dict[str, Any]) -> None:
    _kind_required(schema)
    schema["oneOf"] = [{"required": ["items"]}, {"required": ["element"]}]


class VectorNode(_ItemsMixin):
    """A Julia array of references (``Vector{Any}``, a Python ``list``) or of non-number elements
    (``Vector{Symbol}``, a :class:`treexchange.JuliaArray`; ``type`` says which).

    Either ``items`` (one node per position, exact length) or ``element`` (every element matches
    it) with an optional ``length`` (exact, symbolic or free).
    """

    model_config = ConfigDict(json_schema_extra=_vector_json_schema)

    kind: Literal["vector"] = "vector"
    element: Node | None = Field(default=None, description="Schema of every element (instead of items).")
    length: Dim = Field(default=None, description="Length with 'element': int, symbolic name or null.")
    type: str | None = Field(default=None, description="The Julia type, e.g. 'Vector{Any}'.")

    @model_validator(mode="after")
    def _items_or_element(self) -> VectorNode:
        if (self.items is None) == (self.element is None):
            raise ValueError("a vector node needs exactly one of 'items' and 'element'")
        if self.items is not None and self.length is not None:
            raise ValueError("'length' goes with 'element'; with 'items' the length is len(items)")
        return self

    def summary(self) -> str:
        if self.items is not None:
            return f"vector of {len(self.items)}"
        return "vector" if self.length is None else f"vector of {self.length}"

    def children(self) -> Iterator[tuple[str | int, Node]]:
        if self.element is not None:
            return iter([("*", self.element)])
        return super().children()


class DictNode(_NodeBase):
    """A Julia ``Dict``. Keys are written as path segments (text); entry order is not significant."""

    kind: Literal["dict"] = "dict"
    type: str | None = Field(default=None, description="The Julia type, e.g. 'Dict{String, Any}'.")
    entries: dict[str, Node] = Field(default_factory=dict)

    def summary(self) -> str:
        return f"dict of {len(self.entries)}"

    def children(self) -> Iterator[tuple[str | int, Node]]:
        return iter(self.entries.items())


class GroupNode(_NodeBase):
    """A nested group of a JLD2 file (``save(path, {"a/b": x})``); members are unordered."""

    kind: Literal["group"] = "group"
    entries: dict[str, Node] = Field(default_factory=dict)

    def summary(self) -> str:
        return f"group ({', '.join(self.entries)})"

    def children(self) -> Iterator[tuple[str | int, Node]]:
        return iter(self.entries.items())


class ArrayNode(_NodeBase):
    """An array: element dtype and Julia-order shape (``W[i, j]`` has shape ``(out, in)`` for Dense).

    ``dtype`` is the numpy name (``float32``, ``bfloat16``, ``complex64``, ``bool``).
    ``shape`` entries are ints, symbolic names (bound consistently across the whole document) or
    ``null`` (free); ``shape`` itself ``null`` accepts any rank. ``sha256`` is the digest of the
    elements in Julia column-major order, little-endian (the bytes JLD2 stores). (Arrays of
    non-number elements are ``vector`` nodes.)
    """

    kind: Literal["array"] = "array"
    dtype: str | None = Field(default=None, description="numpy dtype name; null accepts any.")
    shape: list[Dim] | None = Field(default=None, description="Julia-order shape; null accepts any.")
    sha256: str | None = Field(default=None, pattern=_SHA256)

    def summary(self) -> str:
        parts = ["array"]
        if self.dtype is not None:
            parts.append(self.dtype)
        if self.shape is not None:
            parts.append(format_shape(self.shape))
        return " ".join(parts)


class NumberNode(_NodeBase):
    """A scalar number. ``dtype``: numpy name (``float32``, ``int64``, ``int128``, ``complex128``...).

    Optional value constraints: ``enum`` (allowed values), ``minimum`` / ``maximum`` (inclusive).
    ``type`` names the Julia type of primitive bits values without a numpy dtype (enums, ``Char``).
    ``value`` (2.1) records the exact content, as ``sha256`` does for an array.
    """

    kind: Literal["number"] = "number"
    dtype: str | None = None
    type: str | None = None
    enum: list[NumberValue] | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    value: NumberValue | None = Field(default=None, description=_VALUE_HELP)

    def summary(self) -> str:
        return f"number {self.dtype or self.type or ''}".rstrip()


class BoolNode(_NodeBase):
    """A ``Bool``; ``enum`` optionally restricts it (``[true]``); ``value`` (2.1) records it."""

    kind: Literal["bool"] = "bool"
    enum: list[bool] | None = None
    value: bool | None = Field(default=None, description=_VALUE_HELP)


class StringNode(_NodeBase):
    """A ``String``; ``enum`` optionally lists the allowed values; ``value`` (2.1) records it."""

    kind: Literal["string"] = "string"
    enum: list[str] | None = None
    value: str | None = Field(default=None, description=_VALUE_HELP)


class SymbolNode(_NodeBase):
    """A ``Symbol``; ``enum`` optionally lists the allowed values (without the ``:``); ``value``
    (2.1) records it."""

    kind: Literal["symbol"] = "symbol"
    enum: list[str] | None = None
    value: str | None = Field(default=None, description=_VALUE_HELP)


class SingletonNode(_NodeBase):
    """A zero-size value: ``()`` (type ``Tuple{}``), ``nothing`` (``Nothing``), ``missing``
    (``Missing``), or a named singleton type such as an activation function (``typeof(relu)``,
    stored by JLD2 as ``NNlib.#relu``)."""

    kind: Literal["singleton"] = "singleton"
    type: str = Field(description="'Tuple{}', 'Nothing', 'Missing' or the Julia type as printed.")

    def summary(self) -> str:
        return "()" if self.type == "Tuple{}" else self.type


PathSegmentValue = str | int


class RefNode(_NodeBase):
    """The object described at an earlier path, reached again: a **cycle** (an object that holds
    itself, or a tree node pointing back to its parent) or a **shared** mutable object (a
    ``Vector``, ``Dict``, mutable struct or group reached from two places). ``target`` is that
    earlier path in inspect's convention (top-level name first, 1-based positions), where the
    object is described in full; it comes before this node in document order.
    """

    kind: Literal["ref"] = "ref"
    target: list[PathSegmentValue] = Field(
        min_length=1, description="Path of the place where the object is described (name first)."
    )

    def summary(self) -> str:
        return f"ref to {format_path(tuple(self.target))}"


Node = Annotated[
    NamedTupleNode
    | TupleNode
    | VectorNode
    | DictNode
    | StructNode
    | GroupNode
    | ArrayNode
    | NumberNode
    | BoolNode
    | StringNode
    | SymbolNode
    | SingletonNode
    | RefNode,
    Field(discriminator="kind"),
]
"""Any schema node (a discriminated union on ``kind``)."""


class Producer(_Base):
    """Who made the schema and from what (informative only; never validated)."""

    name: str = Field(default="treexchange", description="The program that wrote the schema.")
    version: str | None = Field(default=None, description="Its version.")
    source: str | None = Field(default=None, description="What was inferred: a file name, 'values', ...")
    julia: str | None = Field(default=None, description="Producer note of the source file.")
    format: str | None = Field(default=None, description="Format of the source file (JLD2 version).")


class Schema(_Base):
    """A schema document: version, producer, and one root node per top-level name.

    Example:
        >>> from treexchange import Schema
        >>> x = {"kind": "array", "dtype": "float32", "shape": [3, "batch"]}
        >>> doc = Schema.model_validate({"roots": {"x": x}})
        >>> doc.schema_version, doc.roots["x"].summary()
        ('2.1', 'array float32 (3, batch)')
        >>> Schema.model_validate_json(doc.to_json()) == doc
        True
    """

    schema_version: str = Field(
        default=SCHEMA_VERSION,
        pattern=r"^2\.[0-9]+$",
        description="Version of this document format: 'MAJOR.MINOR'.",
    )
    producer: Producer | None = None
    description: str | None = None
    roots: dict[str, Node] = Field(default_factory=dict, description="One node per top-level name.")

    @model_validator(mode="after")
    def _bounded_depth(self, info: ValidationInfo) -> Schema:
        # Limits.max_schema_depth: real state trees are a few levels deep; the bound keeps every
        # document within what the JSON (de)serializers nest safely. load_schema passes its limits.
        limits: Limits = (info.context or {}).get("limits", DEFAULT_LIMITS)
        most = limits.max_schema_depth
        stack: list[tuple[Node, int]] = [(node, 1) for node in self.roots.values()]
        refs = False
        while stack:
            node, depth = stack.pop()
            if depth > most:
                raise ValueError(f"the tree is deeper than max_schema_depth={most} levels")
            refs = refs or node.kind == "ref"
            stack.extend((child, depth + 1) for _, child in node.children())
        if refs:  # (a second walk, with paths, only for the documents that have back-references)
            _check_ref_targets(self.roots)
        return self

    def to_json(self, *, indent: int | None = 2) -> str:
        """The document as JSON text (``null`` members left out, key order as in the models).

        With ``indent`` (default 2) nested structure is indented and anything that fits on one
        line of 100 characters stays on one line; ``indent=None`` gives the most compact text.
        """
        with gc_paused():
            if indent is None:
                return self.model_dump_json(exclude_none=True)
            return pretty_json(self.to_dict(), indent=indent)

    def to_dict(self) -> dict[str, Any]:
        """The document as JSON-ready Python data."""
        with gc_paused():
            return self.model_dump(mode="json", exclude_none=True)

    def node_at(self, path: TreePath | list[str | int]) -> Node:
        """The node at ``path`` (inspect convention). KeyError when there is none.

        Example:
            >>> from treexchange import Schema
            >>> doc = Schema.model_validate({"roots": {"s": {"kind": "tuple", "items": [{"kind": "bool"}]}}})
            >>> doc.node_at(("s", 1)).kind
            'bool'
        """
        if not path:
            raise KeyError("empty path")
        node: Node = self.roots[str(path[0])]
        for seg in path[1:]:
            for key, child in node.children():
                if key == seg:
                    node = child
                    break
            else:
                raise KeyError(seg)
        return node


def path_key(path: TreePath | list[str | int]) -> tuple[str, ...]:
    """A path compared segment by segment as text: a Dict's key ``3`` is the entry ``"3"``.

    Example:
        >>> path_key(("d", 3, "x")) == path_key(["d", "3", "x"])
        True
    """
    return tuple(map(str, path))  # (in C: a path as deep as the tree is keyed at every level)


def iter_paths(roots: dict[str, Node]) -> Iterator[tuple[TreePath, Node]]:
    """Every node of ``roots`` with its path, in document order (pre-order: a node before its
    children, children in order)."""
    stack: list[tuple[TreePath, Node]] = [((key,), node) for key, node in reversed(roots.items())]
    while stack:
        path, node = stack.pop()
        yield path, node
        stack.extend(((*path, seg), child) for seg, child in reversed(list(node.children())))


def _check_ref_targets(roots: dict[str, Node]) -> None:
    """Each ``ref`` names a place described earlier in the document (an ancestor or a node
    before it) that is not itself a ``ref``."""
    seen: dict[tuple[str, ...], Node] = {}
    for path, node in iter_paths(roots):
        if isinstance(node, RefNode):
            target = seen.get(path_key(node.target))
            if target is None:
                raise ValueError(
                    f"{format_path(path)}: ref target {format_path(tuple(node.target))} is not a place "
                    "described earlier in the document"
                )
            if isinstance(target, RefNode):
                raise ValueError(
                    f"{format_path(path)}: ref target {format_path(tuple(node.target))} is a ref"
                )
        seen[path_key(path)] = node


def format_shape(shape: list[Dim] | tuple[Any, ...]) -> str:
    """Julia-style text for a shape: ``(16, 1)``, ``(3,)``, ``()``, ``(batch, :)`` for free dims.

    Example:
        >>> format_shape([16, None, "batch"]), format_shape([3]), format_shape([])
        ('(16, :, batch)', '(3,)', '()')
    """
    parts = [":" if d is None else str(d) for d in shape]
    if len(parts) == 1:
        return f"({parts[0]},)"
    return f"({', '.join(parts)})"


for _model in (NamedField, NamedTupleNode, StructNode, TupleNode, VectorNode, DictNode, GroupNode, Schema):
    _model.model_rebuild()
