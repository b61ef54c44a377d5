"""A small, safe AST for Julia types as JLD2 stores them (``julia_type`` attributes).

A type is a name plus parameters: ``Core.Array{Core.Float32,2}`` is
``JuliaType("Core.Array", (JuliaType("Core.Float32"), np.int64(2)))``. Parameters that are values
(``2``, ``true``, ``:relu``, the names tuple ``(:weight, :bias)`` of a NamedTuple) keep their exact
Python value-model type so a writer can re-encode them with the same Julia type.

A value parameter other than a number, ``Bool``, string, Symbol or tuple (a struct, NamedTuple,
singleton, ``missing``) is a :class:`TypeParameterValue` and prints itself: this module knows no
value class, and the value model (:mod:`._values`), which builds on types, imports this one.

Text is only ever *parsed* by a hand-written recursive-descent parser (never ``eval``), with a
depth limit, and printed in two forms: :meth:`JuliaType.qualified` (as stored, with modules) and
``str()`` (as Julia prints it: ``Core.``/``Base.`` prefixes dropped, ``", "`` between parameters).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ._errors import FormatError, LimitError
from ._limits import DEFAULT_LIMITS, Limits
from ._symbol import Symbol

# Module prefixes Julia leaves out when it prints a type.
_IMPLICIT_MODULES = ("Core.", "Base.")

BIGINT_NAME = "Base.GMP.BigInt"
"""Julia's ``BigInt`` named by its defining module, as JLD2 records it (every Julia 1.x)."""
_BIGINT_NAMES = frozenset({BIGINT_NAME, "Base.BigInt", "BigInt"})


def is_bigint_name(name: str) -> bool:
    """Whether ``name`` is one of the names of Julia's ``BigInt``: its defining module's
    (``Base.GMP.BigInt``, what JLD2 writes), Base's re-export (``Base.BigInt``) or the bare name
    Julia prints.

    Example:
        >>> [is_bigint_name(n) for n in ("Base.GMP.BigInt", "Base.BigInt", "BigInt", "Main.BigInt")]
        [True, True, True, False]
    """
    return normalize_name(name) in _BIGINT_NAMES


BIGFLOAT_NAME = "Base.MPFR.BigFloat"
"""Julia's ``BigFloat`` named by its defining module, as JLD2 records it (every Julia 1.x)."""
_BIGFLOAT_NAMES = frozenset({BIGFLOAT_NAME, "Base.BigFloat", "BigFloat"})


def is_bigfloat_name(name: str) -> bool:
    """Whether ``name`` is one of the names of Julia's ``BigFloat``: its defining module's
    (``Base.MPFR.BigFloat``, what JLD2 writes), Base's re-export (``Base.BigFloat``) or the bare
    name Julia prints.

    Example:
        >>> [is_bigfloat_name(n) for n in ("Base.MPFR.BigFloat", "Base.BigFloat", "BigFloat", "Main.Big")]
        [True, True, True, False]
    """
    return normalize_name(name) in _BIGFLOAT_NAMES


# Parameterless types Julia prints with braces: ``Tuple{}`` (the empty tuple's type, which JLD2
# stores as a bare ``Core.Tuple``) and ``Union{}`` (the bottom type; a bare ``Union`` is another
# type). The qualified form stays as JLD2 stores names.
_EMPTY_BRACES = frozenset({"Core.Tuple", "Tuple", "Core.Union", "Union"})
# Parse errors quote at most this much of the text.
_QUOTE_CHARS = 80
_INT64_RANGE = range(-(2**63), 2**63)


class TypeParameterValue:
    """A value that can stand as a type parameter and prints itself there as Julia's ``show``
    does: ``(a = 1, b = 2)``, ``relu``, ``UnitRange{Int64}(1, 320)``, ``missing``, ``'a'``.

    The value model's classes (:mod:`._values`: structs, NamedTuples, singletons, bits values,
    ``missing``) implement it; the type printer calls it for any parameter that is not a type,
    number, ``Bool``, string, Symbol, tuple or ``nothing``.
    """

    __slots__ = ()

    def _julia_param_text(self, *, short: bool, sep: str) -> str:
        """This value as a type parameter: Julia's printing if ``short``, else as JLD2 stores
        it; ``sep`` goes between parameters. Nested parameters go through ``_render_param``,
        which keeps the whole text within its budget."""
        raise NotImplementedError


class JuliaType:
    """A Julia type: qualified ``name`` (``"Core.NamedTuple"``) and ``params``.

    Example:
        >>> from treexchange import JuliaType
        >>> t = JuliaType.parse("Core.Array{Core.Float32,2}")
        >>> t.name, t.params[1]
        ('Core.Array', np.int64(2))
        >>> str(t)
        'Array{Float32, 2}'
        >>> t.qualified()
        'Core.Array{Core.Float32,2}'
    """

    __slots__ = ("_hash", "name", "params")

    def __init__(self, name: str, params: tuple[Any, ...] | list[Any] = ()) -> None:
        self.name = normalize_name(name)
        self.params: tuple[Any, ...] = tuple(params)
        self._hash: int | None = None

    @classmethod
    def _repeated(cls, name: str, param: Any, n: int) -> JuliaType:
        """``JuliaType(name, (param,) * n)``, its hash computed from the one parameter (the
        ``Tuple`` type of a long tuple of one layer type: no pass over its ``n`` parameters).

        Example:
            >>> from treexchange import JuliaType
            >>> t = JuliaType._repeated("Tuple", JuliaType("Core.Int64"), 3)
            >>> u = JuliaType.parse("Tuple{Core.Int64,Core.Int64,Core.Int64}")
            >>> t == u, hash(t) == hash(u)
            (True, True)
        """
        t = cls(name, (param,) * n)
        t._hash = hash((t.name, (_param_hash(param),) * n))
        return t

    # --- identity -------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, JuliaType):
            return NotImplemented
        if self.name != other.name or hash(self) != hash(other):
            return False
        # Pairs found equal so far in this comparison, by identity: two DAG-shaped types
        # compare in time linear in their distinct objects, not in their printed size.
        seen = _EQUAL.pairs
        if seen is None:
            _EQUAL.pairs = set()
            try:
                return _params_equal(self.params, other.params)
            finally:
                _EQUAL.pairs = None
        key = (id(self), id(other))
        if key in seen:
            return True
        equal = _params_equal(self.params, other.params)
        if equal:
            seen.add(key)  # both are alive for the whole comparison: their ids stay unique
        return equal

    def __hash__(self) -> int:
        # Structural and cached per object: a type-parameter DAG (``Tuple{T,T}`` nested 40
        # times) hashes in time linear in its number of distinct objects, not its printed size.
        if self._hash is None:
            params = self.params
            if len(params) > _DISTINCT_FROM:
                # each distinct object hashed once (a Tuple of thousands of one layer type), the
                # loops over all of them in C
                ids = list(map(id, params))
                if ids.count(ids[0]) == len(ids):  # one object throughout (by identity: no __eq__)
                    self._hash = hash((self.name, (_param_hash(params[0]),) * len(params)))
                else:
                    by_id = dict(zip(ids, params))
                    hashes = {i: _param_hash(p) for i, p in by_id.items()}
                    self._hash = hash((self.name, tuple(map(hashes.__getitem__, ids))))
            else:
                self._hash = hash((self.name, tuple(_param_hash(p) for p in params)))
        return self._hash

    def __repr__(self) -> str:
        return f"JuliaType({self.qualified()!r})"

    def __str__(self) -> str:
        """The type as Julia prints it; text longer than ``Limits().max_type_chars`` is cut
        (``…`` marks the cut), so a type-parameter DAG cannot make printing exponential."""
        return _render_top(self, short=True, sep=", ", strict=False)

    # --- views ----------------------------------------------------------------------------
    @property
    def basename(self) -> str:
        """The name without its module path: ``"NamedTuple"`` for ``Core.NamedTuple``."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def short_name(self) -> str:
        """The name as Julia prints it (``Core.``/``Base.`` dropped)."""
        return _short(self.name)

    def qualified(self) -> str:
        """The type as JLD2 writes names: full module paths, ``,`` between parameters.

        Raises:
            LimitError: the text would be longer than ``Limits().max_type_chars``.
        """
        return _render_top(self, short=False, sep=",", strict=True)

    def is_named(self, *names: str) -> bool:
        """Whether the short name is one of ``names`` (``t.is_named("Tuple", "NTuple")``)."""
        return self.short_name in names

    def _render(self, *, short: bool, sep: str) -> str:
        if (
            self.name == "Core.UnionAll"
            and len(self.params) == 1
            and not isinstance(self.params[0], JuliaType)
        ):
            return _render_param(self.params[0], short=short, sep=sep)  # see where_type
        head = _short(self.name) if short else self.name
        if not self.params and not (short and self.name in _EMPTY_BRACES):
            return head
        budget = _BUDGET.current
        if budget is not None:
            hit = budget.memo.get(id(self))
            if hit is not None:
                budget.spend(len(hit))
                return hit
        if short and head in ("Tuple", "NTuple") and self.params:
            text = self._render_tuple(head, sep)
        else:
            inner = sep.join(_render_param(p, short=short, sep=sep) for p in self.params)
            text = f"{head}{{{inner}}}"
        if budget is not None:
            budget.remember(self, text)  # the type tree keeps self alive: its id stays unique
            budget.spend(len(head) + 2)
        return text

    def _render_tuple(self, head: str, sep: str) -> str:
        """A tuple type as Julia's ``show`` prints it: ``NTuple{N, T}`` (how JLD2 stores a
        homogeneous pair) is the tuple of ``N`` copies of ``T``, and any tuple type of more than 3
        identical parameters prints as ``NTuple{N, T}``: ``Tuple{2, 2}``, ``NTuple{4, Float64}``.
        Parameters are compared by their (budgeted, memoised) text, never structurally, so a
        type-parameter DAG costs no more than printing it."""
        params = self.params
        count = params[0] if head == "NTuple" and len(params) == 2 else None
        if isinstance(count, (int, np.integer)) and not isinstance(count, (bool, np.bool_)):
            element = _render_param(params[1], short=True, sep=sep)
            if int(count) > 3:
                return f"NTuple{{{int(count)}{sep}{element}}}"
            return f"Tuple{{{sep.join([element] * max(int(count), 0))}}}"
        items = [_render_param(p, short=True, sep=sep) for p in params]
        if head == "NTuple":
            return f"NTuple{{{sep.join(items)}}}"
        if len(items) > 3 and all(item == items[0] for item in items):
            return f"NTuple{{{len(items)}{sep}{items[0]}}}"
        return f"Tuple{{{sep.join(items)}}}"

    # --- parsing --------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str, *, limits: Limits = DEFAULT_LIMITS) -> JuliaType:
        """Parse type text such as ``"Core.NamedTuple{(:a, :b),Core.Tuple{Int64,Float32}}"``.

        Raises:
            FormatError: the text is not a type expression this parser understands, or its
                parameters nest deeper than ``limits.max_type_text_depth`` (64 by default).

        Example:
            >>> from treexchange import JuliaType
            >>> str(JuliaType.parse("Core.Array{Core.Float32,2}"))
            'Array{Float32, 2}'
        """
        parser = _Parser(text, limits.max_type_text_depth)
        value = parser.parse_param(0)
        parser.expect_end()
        if not isinstance(value, JuliaType):
            raise parser._error("not a type")
        return value


def where_type(unionall: Any) -> JuliaType:
    """A ``where`` type (a Julia ``UnionAll`` such as ``Foo{T} where T``, the element type of a
    ``Vector{Foo}``) as a :class:`JuliaType`: named ``Core.UnionAll`` with one parameter, the
    ``UnionAll`` value as the file stores it (``var``, a ``TypeVar``; ``body``). It prints as Julia
    prints the type; the type ``UnionAll`` itself has no parameters, so the two never meet.

    Example:
        >>> from treexchange import JuliaStruct, JuliaType, Symbol
        >>> from treexchange._juliatype import where_type
        >>> T = JuliaStruct("Core.TypeVar", {"name": Symbol("T"), "lb": None, "ub": None})
        >>> body = JuliaType("Main.Foo", (T,))
        >>> str(where_type(JuliaStruct("Core.UnionAll", {"var": T, "body": body})))
        'Main.Foo{T} where T'
    """
    return JuliaType("Core.UnionAll", (unionall,))


class _TooLong(Exception):
    pass


class _Budget:
    """One rendering: rendered sub-types by identity (a DAG is rendered once per object) and
    the characters produced so far (a DAG's text can still be exponentially long: cut it)."""

    def __init__(self, cap: int, short: bool, sep: str) -> None:
        self.cap = cap
        self.spent = 0
        shared = _SHARED.memos
        # Inside shared_renderings(): the memo of every rendering of the same form in the block.
        self.memo: dict[int, str] = {} if shared is None else shared.setdefault((short, sep), {})
        self.kept: list[JuliaType] | None = None if shared is None else _SHARED.kept

    def remember(self, t: JuliaType, text: str) -> None:
        self.memo[id(t)] = text
        if self.kept is not None:
            self.kept.append(t)  # (outlives this rendering's type tree: keep t, so its id stays unique)

    def spend(self, n: int) -> None:
        self.spent += n
        if self.spent > self.cap:
            raise _TooLong()


class _Current(threading.local):
    current: _Budget | None = None


_BUDGET = _Current()  # the rendering in progress in this thread


class _Shared(threading.local):
    memos: dict[tuple[bool, str], dict[int, str]] | None = None
    kept: list[JuliaType] | None = None


_SHARED = _Shared()  # the memos that renderings share in this thread (see shared_renderings)


@contextmanager
def shared_renderings() -> Iterator[None]:
    """Within the block, renderings of types in this thread share their memo of rendered
    sub-types: printing each level's type of a struct nested n deep renders each sub-type once,
    not once per level above it (n^2 / 2 sub-type renderings). The texts are kept until the block
    ends: for listings of a file's types (``inspect``, the committed layouts), not for long runs.

    Example:
        >>> inner = JuliaType("Core.Tuple", (JuliaType("Core.Int64"),))
        >>> outer = JuliaType("Core.Tuple", (inner,))
        >>> with shared_renderings():
        ...     str(inner), str(outer)
        ('Tuple{Int64}', 'Tuple{Tuple{Int64}}')
    """
    if _SHARED.memos is not None:  # (nested: the outer block's memos)
        yield
        return
    _SHARED.memos, _SHARED.kept = {}, []
    try:
        yield
    finally:
        _SHARED.memos = _SHARED.kept = None


class _Equal(threading.local):
    pairs: set[tuple[int, int]] | None = None


_EQUAL = _Equal()  # the comparison in progress in this thread


def _render_top(t: JuliaType, *, short: bool, sep: str, strict: bool) -> str:
    if not t.params:
        return t._render(short=short, sep=sep)
    outer = _BUDGET.current
    if outer is not None:  # nested call (a value parameter printing its type): same budget
        return t._render(short=short, sep=sep)
    cap = DEFAULT_LIMITS.max_type_chars  # str(t) has no caller to pass Limits: the default's
    _BUDGET.current = _Budget(cap, short, sep)
    try:
        return t._render(short=short, sep=sep)
    except _TooLong:
        if strict:
            raise LimitError(f"type text longer than max_type_chars={cap} characters") from None
        head = _short(t.name) if short else t.name
        return f"{head}{{…}}"
    finally:
        _BUDGET.current = None


_DISTINCT_FROM = 16  # parameters from which hashing each distinct object once pays


def _param_hash(p: Any) -> int:
    if isinstance(p, JuliaType):
        return hash(p)
    if isinstance(p, tuple):
        return hash(tuple(_param_hash(x) for x in p))
    if isinstance(p, (str, int, float, np.generic)):
        return hash(p)
    return hash(type(p).__name__)  # structs, NamedTuples...: by kind (equality decides)


def normalize_name(name: str) -> str:
    """Collapse the doubled module prefixes of legacy JLD2 files (``Core.Core.Int64``)."""
    found = _NORMALIZED.get(name)
    if found is not None:
        return found
    normal = _normalize(name)
    # (a file names a few dozen types, thousands of times; short names only: bounded memory)
    if len(name) <= _NORMALIZED_CHARS and len(_NORMALIZED) < _NORMALIZED_KEPT:
        _NORMALIZED[name] = normal
    return normal


_NORMALIZED: dict[str, str] = {}
_NORMALIZED_KEPT = 4096
_NORMALIZED_CHARS = 200


def _normalize(name: str) -> str:
    parts = name.split(".")
    out: list[str] = []
    for i, part in enumerate(parts):
        # Only leading module segments repeat; keep e.g. "Base.SparseArrays.SparseMatrixCSC".
        if out and part == out[-1] and i < len(parts) - 1:
            continue
        out.append(part)
    return ".".join(out)


def _short(name: str) -> str:
    if name in _BIGINT_NAMES:
        return "BigInt"  # as Julia prints it (Base exports it from Base.GMP)
    if name in _BIGFLOAT_NAMES:
        return "BigFloat"  # (and from Base.MPFR)
    for prefix in _IMPLICIT_MODULES:
        if name.startswith(prefix) and "." not in name[len(prefix) :]:
            return name[len(prefix) :]
    return name


def _params_equal(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    if a is b:
        return True
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if type(x) is not type(y):
            return False
        if isinstance(x, tuple):
            if not _params_equal(x, y):
                return False
        elif isinstance(x, np.ndarray):
            if not np.array_equal(x, y):
                return False
        elif not bool(x == y):
            return False
    return True


def _render_param(p: Any, *, short: bool, sep: str) -> str:
    """One type parameter as text (the writer keys types by it): budgeted like ``qualified()``."""
    if _BUDGET.current is None and not isinstance(p, (str, int, float, np.generic)):
        cap = _limit_chars()
        _BUDGET.current = _Budget(cap, short, sep)
        try:
            return _render_param_in(p, short=short, sep=sep)
        except _TooLong:
            raise LimitError(f"type text longer than max_type_chars={cap} characters") from None
        finally:
            _BUDGET.current = None
    return _render_param_in(p, short=short, sep=sep)


def _limit_chars() -> int:
    return DEFAULT_LIMITS.max_type_chars


def _render_param_in(p: Any, *, short: bool, sep: str) -> str:
    if isinstance(p, JuliaType):
        return p._render(short=short, sep=sep)
    if isinstance(p, (bool, np.bool_)):
        return "true" if p else "false"
    if isinstance(p, Symbol):
        return p.julia_repr()
    if short:  # as Julia's show prints a value parameter (qualified text stays as stored)
        shown = _julia_shown_number(p)
        if shown is not None:
            return shown
    if isinstance(p, tuple):
        items = [_render_param(x, short=short, sep=sep) for x in p]
        return "(" + (items[0] + "," if len(items) == 1 else sep.join(items)) + ")"
    if isinstance(p, (int, np.integer)):
        return str(int(p))
    if isinstance(p, (float, np.floating)):
        return repr(float(p))
    if isinstance(p, str):
        return '"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if p is None:
        return "nothing"
    if isinstance(p, TypeParameterValue):
        return p._julia_param_text(short=short, sep=sep)
    return repr(p)


def _julia_shown_number(p: Any) -> str | None:
    """``0x07`` for a ``UInt8`` (Julia prints unsigned integers in hex, zero-padded to their
    width), ``1.5f0`` for a ``Float32``, ``Float16(1.5)``; None otherwise (a ``Char`` is a
    :class:`TypeParameterValue`)."""
    if isinstance(p, np.unsignedinteger):
        return f"0x{int(p):0{2 * p.dtype.itemsize}x}"
    if isinstance(p, np.float32):
        text = str(p)  # the shortest text that reads back as this Float32
        mantissa, _, exponent = text.partition("e")
        if "." not in mantissa and mantissa.lstrip("-").isdigit():
            mantissa += ".0"
        return f"{mantissa}f{int(exponent) if exponent else 0}"
    if isinstance(p, np.float16):
        return f"Float16({float(p)!r})"
    return None


_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
      | (?P<sym>:(?:"(?:[^"\\]|\\.)*"|[^\s,{}()":]+))
      | (?P<str>"(?:[^"\\]|\\.)*")
      | (?P<name>[^\s,{}()":]+)
      | (?P<punct>[{},()])
    )""",
    re.VERBOSE,
)


class _Parser:
    def __init__(self, text: str, max_depth: int) -> None:
        self.text = text
        self.pos = 0
        self.max_depth = max_depth

    def _error(self, what: str) -> FormatError:
        text = self.text
        quoted = repr(text) if len(text) <= _QUOTE_CHARS else f"{text[:_QUOTE_CHARS]!r}… ({len(text)} chars)"
        return FormatError(f"cannot parse Julia type {quoted}: {what} at character {self.pos}")

    def peek(self) -> tuple[str, str] | None:
        m = _TOKEN.match(self.text, self.pos)
        if m is None or m.end() == self.pos:
            rest = self.text[self.pos :].strip()
            if rest:
                raise self._error("unexpected text")
            return None
        kind = m.lastgroup or ""
        return kind, m.group(kind)

    def take(self) -> tuple[str, str]:
        m = _TOKEN.match(self.text, self.pos)
        if m is None or not m.lastgroup:
            raise self._error("unexpected end")
        self.pos = m.end()
        return m.lastgroup, m.group(m.lastgroup)

    def expect(self, punct: str) -> None:
        kind, tok = self.take()
        if kind != "punct" or tok != punct:
            raise self._error(f"expected {punct!r}, found {tok!r}")

    def expect_end(self) -> None:
        if self.peek() is not None:
            raise self._error("trailing text")

    def parse_param(self, depth: int) -> Any:
        if depth > self.max_depth:
            raise self._error(f"nesting deeper than max_type_text_depth={self.max_depth}")
        tok = self.peek()
        if tok is None:
            raise self._error("unexpected end")
        kind, text = tok
        if kind == "num":
            self.take()
            if any(c in text for c in ".eE"):
                return np.float64(text)
            # Int64 as JLD2 stores integer parameters; wider literals (Int128, BigInt) stay exact.
            try:
                n = int(text)
            except ValueError:  # beyond Python's int/str conversion limit (4300 digits)
                raise self._error("integer too long") from None
            return np.int64(n) if n in _INT64_RANGE else n
        if kind == "sym":
            self.take()
            body = text[1:]
            return Symbol(_unquote(body) if body.startswith('"') else body)
        if kind == "str":
            self.take()
            return _unquote(text)
        if kind == "punct" and text == "(":
            self.take()
            items: list[Any] = []
            while True:
                nxt = self.peek()
                if nxt == ("punct", ")"):
                    self.take()
                    return tuple(items)
                items.append(self.parse_param(depth + 1))
                nxt = self.peek()
                if nxt == ("punct", ","):
                    self.take()
                elif nxt != ("punct", ")"):
                    raise self._error("expected ',' or ')' in tuple")
        if kind == "name":
            self.take()
            if text in ("true", "false"):
                return text == "true"
            params: list[Any] = []
            if self.peek() == ("punct", "{"):
                self.take()
                if self.peek() == ("punct", "}"):
                    self.take()
                    return JuliaType(text, ())
                while True:
                    params.append(self.parse_param(depth + 1))
                    kind2, tok2 = self.take()
                    if (kind2, tok2) == ("punct", "}"):
                        break
                    if (kind2, tok2) != ("punct", ","):
                        raise self._error("expected ',' or '}' in parameters")
            return JuliaType(text, tuple(params))
        raise self._error(f"unexpected {text!r}")


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", r"\1", body)
