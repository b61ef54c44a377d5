"""Validate a tree against a schema document, reporting *every* violation with its path."""

from __future__ import annotations

from typing import Any

from .._errors import (
    FormatError,
    LimitError,
    Mismatch,
    MismatchError,
    TreePath,
    TreexchangeError,
    clip_type,
    format_path,
)
from .._gc import gc_paused
from .._jsonform import json_scalar
from .._juliatype import JuliaType
from .._limits import DEFAULT_LIMITS, Limits
from .._nodeproto import LazyFile
from .._recursion import stack_for_depth
from .._values import JuliaBits
from ._align import align
from ._content import bits_shown, content_value, same_content, shown_value
from ._infer import file_limits, infer_node
from ._model import (
    ArrayNode,
    BoolNode,
    DictNode,
    GroupNode,
    NamedTupleNode,
    Node,
    NumberNode,
    RefNode,
    Schema,
    SingletonNode,
    StringNode,
    StructNode,
    SymbolNode,
    TupleNode,
    VectorNode,
    format_shape,
    iter_paths,
    path_key,
)
from ._scalars import format_value, number_compare, number_in
from ._sources import (
    DEFAULT_ROOT,
    FileSource,
    Source,
    file_roots,
    is_file_like,
    opened,
    roots_of,
    with_bridge,
)
from ._versions import SchemaLike, load_schema

_MAPPING_KINDS = frozenset({"group", "dict"})


def validate(
    x: Any,
    schema: SchemaLike,
    *,
    name: str | None = None,
    checksums: bool = True,
) -> list[Mismatch]:
    """Every way ``x`` departs from ``schema``; an empty list when it conforms.

    Args:
        x: a file path, an opened file, a value tree (``dict`` of top-level names, or a single
            value) or a PyTree, as for :func:`treexchange.infer_schema`. A single value is checked
            against the schema's only root (or ``name``, or ``"model_state"``).
        schema: a :class:`treexchange.Schema`, a path to a JSON file, JSON text or a JSON-ready
            dict (older versions are migrated; newer major versions are refused).
        name: check only this top-level name (``"a/b"`` reaches into groups).
        checksums: verify the contents the schema records: the ``sha256`` of arrays (reads those
            arrays) and the exact ``value`` of numbers, bools, strings and symbols (``content``).

    Returns:
        :class:`treexchange.Mismatch` entries in pre-order, each with its path (inspect
        convention) and message; kinds ``missing``, ``extra``, ``kind``, ``order``, ``type``,
        ``dtype``, ``shape``, ``checksum``, ``content`` (a recorded scalar value), ``value``,
        ``ref`` (not the object a back-reference names, or a cycle the schema does not describe).

    Example:
        >>> from treexchange import validate
        >>> import numpy as np
        >>> from treexchange import NamedTuple, infer_schema
        >>> doc = infer_schema({"m": NamedTuple(weight=np.zeros((5, 16), np.float32), σ=())})
        >>> bad = {"m": NamedTuple(σ=(), weight=np.zeros((5, 32), np.float32))}
        >>> for m in validate(bad, doc):
        ...     print(m)
        m: order (σ, weight) found, schema expects (weight, σ)
        m.weight: shape (5, 32) found, schema expects (5, 16)
    """
    doc = load_schema(schema)
    with gc_paused():
        if is_file_like(x):
            with opened(x) as file:
                checker = _Checker(checksums=checksums, limits=file_limits(file))
                checker.check_file(file, doc, name)
            del file  # let the lazy nodes go while the collector is paused (see infer_schema)
        else:
            checker = _Checker(checksums=checksums, limits=DEFAULT_LIMITS)
            checker.check_values(x, doc, name)
    return checker.found


def raise_if_invalid(x: Any, schema: SchemaLike, *, name: str | None = None, checksums: bool = True) -> None:
    """:func:`validate`, raising :class:`treexchange.MismatchError` listing every violation."""
    found = validate(x, schema, name=name, checksums=checksums)
    if found:
        raise MismatchError(found, header=f"{len(found)} schema violation(s)")


class _Stop(Exception):
    """Raised in a trial run at the first violation (used to test whether two subtrees match)."""


class _Checker:
    """One validation run: walks schema nodes and source nodes together, collecting mismatches.

    In a *trial* run (``trial=True``, used to align sequences and to guess renames) the first
    mismatch stops the walk: only "does it match?" is wanted, and nothing is recorded.
    """

    def __init__(
        self,
        *,
        checksums: bool,
        limits: Limits,
        trial: bool = False,
        bindings: dict[str, Any] | None = None,
    ) -> None:
        self.found: list[Mismatch] = []
        self.checksums = checksums
        self.trial = trial
        # Symbolic dimension name -> (size, path where it was bound).
        self.bindings: dict[str, tuple[int, TreePath]] = dict(bindings or {})
        # max_schema_depth: how deep the walk goes; max_align_cells: how long a sequence is aligned
        # by trial matches; max_type_text_depth: how deep type text is parsed.
        self.limits = limits
        self.max_depth = limits.max_schema_depth
        # Back-references: the places ``ref`` nodes name (path as text -> the identity of the
        # object met there), and the objects on the current path (identity -> path).
        self.targets: dict[tuple[str, ...], int | None] = {}
        self._active: dict[int, TreePath] = {}

    def add(self, kind: str, path: TreePath, message: str, *, short: str | None = None) -> None:
        if self.trial:
            raise _Stop
        self.found.append(Mismatch(kind, path, message, short=short))

    # --- entry points ------------------------------------------------------------------------

    def check_values(self, x: Any, doc: Schema, name: str | None) -> None:
        if name is None and not (type(x) is dict and all(isinstance(k, str) for k in x)):
            # A single value: the schema's only root, else "model_state".
            name = next(iter(doc.roots)) if len(doc.roots) == 1 else DEFAULT_ROOT

        def work(roots: list[tuple[str, Source]]) -> None:
            self.found, self.bindings = [], {}
            self._check_roots(doc, roots, name)

        with_bridge(roots_of(x, name=name), work)

    def check_file(self, file: LazyFile, doc: Schema, name: str | None) -> None:
        roots: list[tuple[str, Source]] = []
        if name is None:
            for key in file:
                roots.append((str(key), FileSource(file[key], (str(key),))))
        else:
            try:
                roots = file_roots(file, name)
            except TreexchangeError:
                roots = []  # reported below as missing
        self._check_roots(doc, roots, name)

    def _check_roots(self, doc: Schema, roots: list[tuple[str, Source]], name: str | None) -> None:
        # The walk recurses once per level (a few frames each): room on the stack for the deepest
        # tree both the reader and the schema admit (a BSON.jl file 480 deep with a raised
        # max_schema_depth stopped at a bare RecursionError).
        with stack_for_depth(min(self.limits.max_schema_depth, self.limits.max_depth)):
            self._check_roots_in(doc, roots, name)

    def _check_roots_in(self, doc: Schema, roots: list[tuple[str, Source]], name: str | None) -> None:
        self.targets = {path_key(n.target): None for _, n in iter_paths(doc.roots) if isinstance(n, RefNode)}
        expected = doc.roots
        if name is not None:
            top = name.split("/")[0]
            expected = {top: doc.roots[top]} if top in doc.roots else {}
            if not expected:
                have = ", ".join(doc.roots) or "none"
                raise TreexchangeError(f"the schema has no top-level name {top!r} (it has {have})")
        actual = dict(roots)
        for key, node in expected.items():
            if key in actual:
                if name is not None and "/" in name:
                    self._check_partial(node, actual[key], name)
                else:
                    self.node(node, actual[key], 1)
            else:
                self.add("missing", (key,), f"(schema expects {node.summary()})")
        if name is None:
            for key, src in roots:
                if key not in expected:
                    self.add("extra", src.path, "(top-level name not in schema)")

    def _check_partial(self, node: Node, src: Source, name: str) -> None:
        """Check only the group member ``name`` (``"a/b"``) of a group root."""
        parts = name.split("/")
        for depth, part in enumerate(parts[1:], start=1):
            if not isinstance(node, (GroupNode, DictNode)) or part not in node.entries:
                raise TreexchangeError(f"the schema has no {'/'.join(parts[: depth + 1])!r}")
            node = node.entries[part]
            children = dict(src.children())
            if part not in children:
                self.add("missing", (*src.path, part), f"(schema expects {node.summary()})")
                return
            src = children[part]
        self.node(node, src, len(parts))

    # --- nodes ---------------------------------------------------------------------------------

    def node(self, s: Node, a: Source, depth: int) -> None:
        if depth > self.max_depth:
            raise LimitError(f"tree deeper than {self.max_depth} levels", path=a.path)
        if isinstance(s, RefNode):
            self._ref(s, a)
            return
        identity = a.object_address()
        if identity is None:
            self._node(s, a, depth)
            return
        back = self._active.get(identity)
        if back is not None:
            self.add(
                "ref", a.path, f"a cycle back to {format_path(back)} found, schema expects {s.summary()}"
            )
            return
        key = path_key(a.path)
        if key in self.targets:
            self.targets[key] = identity
        self._active[identity] = a.path
        try:
            self._node(s, a, depth)
        finally:
            del self._active[identity]

    def _ref(self, s: RefNode, a: Source) -> None:
        """The value here must be the very object met at the ref's target (a cycle, or sharing)."""
        where = format_path(tuple(s.target))
        expected = self.targets.get(path_key(s.target))
        found = a.object_address()
        if expected is not None and found == expected:
            return
        if expected is None:
            self.add(
                "ref", a.path, f"{a.kind} found; schema expects the object at {where} again, not met there"
            )
        else:
            self.add("ref", a.path, f"a separate {a.kind} found; schema expects the object at {where} again")

    def _node(self, s: Node, a: Source, depth: int) -> None:
        if s.kind != a.kind and not (s.kind in _MAPPING_KINDS and a.kind in _MAPPING_KINDS):
            self.add("kind", a.path, f"{a.kind} found, schema expects {s.summary()}")
            return
        if isinstance(s, (NamedTupleNode, StructNode)):
            if isinstance(s, StructNode):
                self._type(s.type, a)
            self._fields(s, a, depth)
        elif isinstance(s, TupleNode):
            self._items(s.items, a, depth)
        elif isinstance(s, VectorNode):
            self._vector(s, a, depth)
        elif isinstance(s, (DictNode, GroupNode)):
            if isinstance(s, DictNode) and s.type is not None and a.kind == "dict":
                self._type(s.type, a)
            self._entries(s, a, depth)
        elif isinstance(s, ArrayNode):
            self._array(s, a)
        elif isinstance(s, NumberNode):
            self._number(s, a)
        elif isinstance(s, (BoolNode, StringNode, SymbolNode)):
            self._enum(s, a)
        elif isinstance(s, SingletonNode):
            self._type(s.type, a)

    def _type(self, expected: str, a: Source) -> None:
        actual = a.type_text()
        if actual is not None and not same_type(actual, expected, self.limits):
            self.add(
                "type",
                a.path,
                f"{actual} found, schema expects {expected}",
                short=f"{clip_type(actual)} found, schema expects {clip_type(expected)}",
            )

    def _fields(self, s: NamedTupleNode | StructNode, a: Source, depth: int) -> None:
        children = a.children()
        actual = {str(seg): src for seg, src in children}
        actual_names = list(actual)
        expected_names = s.names
        expected_set = set(expected_names)
        in_both_expected = [n for n in expected_names if n in actual]
        in_both_actual = [n for n in actual_names if n in expected_set]
        if in_both_expected != in_both_actual:
            self.add(
                "order",
                a.path,
                f"({', '.join(actual_names)}) found, schema expects ({', '.join(expected_names)})",
            )
        missing = [f for f in s.fields if f.name not in actual]
        extra = [n for n in actual_names if n not in expected_set]
        renamed: dict[str, str] = {}
        if missing and extra and not self.trial:
            renamed = self._guess_renames(missing, [actual[n] for n in extra])
        for f in s.fields:
            if f.name in actual:
                self.node(f.node, actual[f.name], depth + 1)
            else:
                hint = f"; renamed to {renamed[f.name]!r}?" if f.name in renamed else ""
                self.add("missing", (*a.path, f.name), f"(schema expects {f.node.summary()}{hint})")
        back = {v: k for k, v in renamed.items()}
        for n in extra:
            hint = f"; renamed from {back[n]!r}?" if n in back else ""
            self.add("extra", actual[n].path, f"(not in schema: {_describe(actual[n])}{hint})")

    def _guess_renames(self, missing: list[Any], extra: list[Source]) -> dict[str, str]:
        """Missing field name -> extra field name, where that extra field is the only one matching
        the missing field's schema and matches no other missing field (an unambiguous rename)."""
        if len(missing) * len(extra) > 400:  # hints are a courtesy; keep them cheap
            return {}
        fits = [[self.matches(f.node, src) for src in extra] for f in missing]
        out: dict[str, str] = {}
        for i, f in enumerate(missing):
            cols = [j for j, ok in enumerate(fits[i]) if ok]
            if len(cols) == 1 and sum(row[cols[0]] for row in fits) == 1:
                out[f.name] = str(extra[cols[0]].path[-1])
        return out

    def _items(self, expected: list[Node], a: Source, depth: int) -> None:
        children = a.children()
        if len(children) == len(expected):
            for s_item, (_, src) in zip(expected, children):
                self.node(s_item, src, depth + 1)
            return
        pairs = align(
            len(expected),
            len(children),
            lambda i, j: self.matches(expected[i], children[j][1]),
            max_cells=self.limits.max_align_cells,
        )
        for i, j in pairs:
            if i is not None and j is not None:
                self.node(expected[i], children[j][1], depth + 1)
            elif i is not None:
                self.add(
                    "missing",
                    (*a.path, i + 1),
                    f"(schema expects {expected[i].summary()}; {len(children)} of {len(expected)} present)",
                )
            elif j is not None:
                src = children[j][1]
                self.add("extra", src.path, f"(not in schema: {_describe(src)}; schema has {len(expected)})")

    def _vector(self, s: VectorNode, a: Source, depth: int) -> None:
        if s.type is not None:
            self._type(s.type, a)
        if s.items is not None:
            self._items(s.items, a, depth)
            return
        children = a.children()
        if s.length is not None:
            self._dims([s.length], (len(children),), a, what="length")
        assert s.element is not None
        for _, src in children:
            self.node(s.element, src, depth + 1)

    def _entries(self, s: DictNode | GroupNode, a: Source, depth: int) -> None:
        actual = {str(seg): src for seg, src in a.children()}
        for key, node in s.entries.items():
            if key in actual:
                self.node(node, actual[key], depth + 1)
            else:
                self.add("missing", (*a.path, key), f"(schema expects {node.summary()})")
        for key, src in actual.items():
            if key not in s.entries:
                self.add("extra", src.path, f"(not in schema: {_describe(src)})")

    def _array(self, s: ArrayNode, a: Source) -> None:
        ok = True
        if s.dtype is not None:
            dtype = a.dtype()
            if dtype != s.dtype:
                self.add("dtype", a.path, f"{dtype} found, schema expects {s.dtype}")
                ok = False
        if s.shape is not None:
            shape = a.shape() or ()
            ok = self._dims(s.shape, shape, a, what="shape") and ok
        if ok and self.checksums and s.sha256 is not None:
            digest = a.sha256()
            if digest != s.sha256:
                self.add("checksum", a.path, f"sha256 {digest[:16]}… found, schema expects {s.sha256[:16]}…")

    def _dims(self, expected: list[Any], actual: tuple[int, ...], a: Source, *, what: str) -> bool:
        """Compare dimensions; bind symbolic names (only from otherwise matching shapes)."""

        def message() -> str:
            if what == "shape":
                return f"{format_shape(list(actual))} found, schema expects {format_shape(expected)}"
            return f"length {actual[0]} found, schema expects {expected[0]}"

        if len(expected) != len(actual) or any(
            isinstance(want, int) and want != got for want, got in zip(expected, actual)
        ):
            self.add("shape", a.path, message())
            return False
        new: dict[str, tuple[int, TreePath]] = {}
        for want, got in zip(expected, actual):
            if isinstance(want, str):
                bound = self.bindings.get(want) or new.get(want)
                if bound is not None and bound[0] != got:
                    where = format_path(bound[1])
                    self.add("shape", a.path, f"{message()} with {want} = {bound[0]} (bound at {where})")
                    return False
                new.setdefault(want, (got, a.path))
        for key, value in new.items():
            self.bindings.setdefault(key, value)
        return True

    def _number(self, s: NumberNode, a: Source) -> None:
        if s.dtype is not None and a.dtype() != s.dtype:
            self.add("dtype", a.path, f"{a.dtype() or a.type_text()} found, schema expects {s.dtype}")
            return
        if s.type is not None:
            self._type(s.type, a)
        checks_content = s.value is not None and self.checksums
        if not checks_content and s.enum is None and s.minimum is None and s.maximum is None:
            return
        value = a.scalar()  # (read once for both checks: a file node reads it from the file)
        found_type = a.type_text()  # (asked once: the content's encoding, and a Char shown as one)
        # A bits value with no numpy dtype (Char, @enum, pointer) is shown as inspect shows it; the
        # integers the schema records for it are shown at the width of the value found.
        bits = s.type or found_type
        size = len(value.data) if isinstance(value, JuliaBits) else None
        if checks_content:
            found = content_value(value, found_type)
            self._content(s.value, found, a, number=True, julia_type=bits, size=size)
        if s.enum is None and s.minimum is None and s.maximum is None:
            return
        shown = bits_shown(value, bits) or format_value(json_scalar(value))
        if s.enum is not None and not number_in(value, s.enum):
            self.add("value", a.path, f"{shown} found, schema allows {_enum_text(s.enum, bits, size)}")
        for attr, bound, outside in (("minimum", s.minimum, -1), ("maximum", s.maximum, 1)):
            if bound is None:
                continue
            order = number_compare(value, bound)
            if order is None or order == outside:
                limit = bits_shown(bound, bits, size) or bound
                self.add("value", a.path, f"{shown} found, schema {attr} is {limit}")

    def _enum(self, s: BoolNode | StringNode | SymbolNode, a: Source) -> None:
        if s.enum is None and (s.value is None or not self.checksums):
            return
        value = a.scalar()
        plain = bool(value) if isinstance(s, BoolNode) else str(value)
        if s.value is not None and self.checksums:
            self._content(s.value, plain, a)
        if s.enum is not None and plain not in s.enum:
            self.add("value", a.path, f"{format_value(plain)} found, schema allows {_enum_text(s.enum)}")

    def _content(
        self,
        recorded: Any,
        found: Any,
        a: Source,
        *,
        number: bool = False,
        julia_type: str | None = None,
        size: int | None = None,
    ) -> None:
        """A scalar's exact value against the one the schema records (checked with checksums)."""
        if not same_content(found, recorded):
            shown = shown_value(found, number=number, julia_type=julia_type, size=size)
            expected = shown_value(recorded, number=number, julia_type=julia_type, size=size)
            self.add("content", a.path, f"{shown} found, schema records {expected}")

    # --- trial runs ------------------------------------------------------------------------------

    def matches(self, s: Node, a: Source) -> bool:
        """Whether ``a`` conforms to ``s`` (structure only: no checksums, no lasting bindings)."""
        trial = _Checker(checksums=False, limits=self.limits, trial=True, bindings=self.bindings)
        trial.targets, trial._active = dict(self.targets), dict(self._active)
        try:
            trial.node(s, a, 1)
        except _Stop:
            return False
        except (FormatError, KeyError):
            return False
        return True


def _enum_text(values: list[Any], julia_type: str | None = None, size: int | None = None) -> str:
    return "[" + ", ".join(bits_shown(v, julia_type, size) or format_value(v) for v in values) + "]"


def _describe(src: Source) -> str:
    try:
        return infer_node(src).summary()
    except Exception:  # a description is best effort; the mismatch itself is what matters
        return src.kind


def same_type(a: str, b: str, limits: Limits = DEFAULT_LIMITS) -> bool:
    """Whether two Julia type texts name the same type (module prefixes Core./Base. and spacing aside).

    Example:
        >>> same_type("Core.Array{Core.Float32,2}", "Array{Float32, 2}"), same_type("Nothing", "Missing")
        (True, False)
    """
    if a == b:
        return True
    return _canonical_type(a, limits) == _canonical_type(b, limits)


def _canonical_type(text: str, limits: Limits) -> str:
    try:
        return str(JuliaType.parse(text, limits=limits))
    except FormatError:
        return "".join(text.split())
