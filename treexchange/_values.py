"""The Python face of Julia values (the *value model*, see docs/design.md).

=====================================  =============================================================
Julia                                  Python
=====================================  =============================================================
``NamedTuple``                         :class:`NamedTuple` (ordered, immutable mapping; JAX pytree)
``Tuple`` / ``()``                     ``tuple`` / ``()``
``Vector{Any}`` (array of references)  ``list``
other arrays of non-bits elements      :class:`JuliaArray` (element type + object ndarray)
``Array{T,N}`` of numbers / Bool       ``numpy.ndarray`` in Julia's shape (F-ordered)
numbers                                numpy scalars of the exact dtype; ``Int128``/``UInt128`` as
                                       :class:`Int128` / :class:`UInt128` (``int`` subclasses),
                                       ``BigInt`` as :class:`BigInt` (an ``int`` subclass),
                                       ``BigFloat`` as :class:`BigFloat` (its decimal text)
``Bool``                               ``bool``
``String`` / ``Symbol``                ``str`` / :class:`Symbol`
``nothing`` / ``missing``              ``None`` / :data:`MISSING`
``#undef`` (an unassigned reference)   :data:`UNDEF`
``Dict``                               :class:`JuliaDict` (a ``dict`` that remembers it is a Dict)
other structs                          :class:`JuliaStruct`
primitive bits types (enums, ``Char``) :class:`JuliaBits`
other zero-size values (functions)     :class:`Singleton`
a closure read from a BSON.jl file     :class:`Closure` (a :class:`Singleton` naming its definition)
=====================================  =============================================================

This module imports no JAX: :class:`NamedTuple`, :class:`JuliaStruct` and :class:`JuliaArray` are
registered as pytree nodes the moment ``jax`` is imported (or at once if it already is).
"""

from __future__ import annotations

import functools
import importlib.machinery
import json
import math
import re
import reprlib
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from types import ModuleType
from typing import Any, ClassVar, Literal

import numpy as np

from ._juliatype import (
    BIGFLOAT_NAME,
    BIGINT_NAME,
    JuliaType,
    TypeParameterValue,
    _render_param,
    _short,
    is_bigfloat_name,
    is_bigint_name,
)
from ._symbol import Symbol as Symbol  # defined below the type AST, which parses Symbols


class NamedTuple(Mapping[str, Any], TypeParameterValue):
    """A Julia ``NamedTuple``: an immutable mapping whose field order is part of its identity.

    Fields are reached by key (``nt["σ²"]``) or, for identifier names, by attribute
    (``nt.weight``). Two NamedTuples are equal when they have the same fields in the same order
    with equal values. JAX's ``tree_util`` keeps the field order (a plain ``dict`` would be sorted).

    Example:
        >>> from treexchange import NamedTuple
        >>> nt = NamedTuple(weight=1.0, bias=2.0, σ=())
        >>> list(nt), nt.bias, nt["σ"]
        (['weight', 'bias', 'σ'], 2.0, ())
        >>> nt == NamedTuple([("bias", 2.0), ("weight", 1.0), ("σ", ())])
        False
        >>> nt.replace(bias=3.0)
        NamedTuple(weight=1.0, bias=3.0, σ=())
    """

    __slots__ = ("_data",)

    def __init__(self, fields: Mapping[str, Any] | Iterable[tuple[str, Any]] = (), /, **kwargs: Any) -> None:
        data: dict[str, Any] = {}
        items = fields.items() if isinstance(fields, Mapping) else fields
        for key, value in items:
            if not isinstance(key, str):
                raise TypeError(f"NamedTuple field names must be str, not {type(key).__name__}")
            if key in data:
                raise ValueError(f"duplicate NamedTuple field {key!r}")
            data[key] = value
        for key, value in kwargs.items():
            if key in data:
                raise ValueError(f"duplicate NamedTuple field {key!r}")
            data[key] = value
        object.__setattr__(self, "_data", data)

    @classmethod
    def _of_dict(cls, data: dict[str, Any]) -> NamedTuple:
        """A NamedTuple holding ``data`` itself (not copied; its keys are str, checked by the
        caller): for the package's own conversions, which build one per layer of a model."""
        obj = object.__new__(cls)
        object.__setattr__(obj, "_data", data)
        return obj

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __getattr__(self, name: str) -> Any:
        try:
            return object.__getattribute__(self, "_data")[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("NamedTuple is immutable; use .replace(...)")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NamedTuple):
            return NotImplemented
        if list(self._data) != list(other._data):
            return False
        return all(_values_equal(self._data[k], other._data[k]) for k in self._data)

    __hash__ = None  # type: ignore[assignment]  # holds arrays; like dict, not hashable

    def __repr__(self) -> str:
        inner = ", ".join(
            f"{k}={v!r}" if k.isidentifier() else f"{k!r}: {v!r}" for k, v in self._data.items()
        )
        if any(not k.isidentifier() for k in self._data):
            inner = ", ".join(f"{k!r}: {v!r}" for k, v in self._data.items())
            return f"NamedTuple({{{inner}}})"
        return f"NamedTuple({inner})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (NamedTuple, (list(self._data.items()),))

    def replace(self, **changes: Any) -> NamedTuple:
        """A copy with some fields' values replaced (order kept). Unknown names raise KeyError."""
        for key in changes:
            if key not in self._data:
                raise KeyError(key)
        return NamedTuple((k, changes.get(k, v)) for k, v in self._data.items())

    def _julia_param_text(self, *, short: bool, sep: str) -> str:
        inner = sep.join(f"{k} = {_render_param(v, short=short, sep=sep)}" for k, v in self._data.items())
        return f"({inner},)" if len(self._data) == 1 else f"({inner})"


class JuliaDict(dict):  # type: ignore[type-arg]
    """A Julia ``Dict``: a ``dict`` that remembers it is one, so that it is written back as a
    ``Dict`` (``treexchange.save`` writes a *plain* ``dict`` with ``str`` keys as a
    ``NamedTuple``, the form Lux and Flux states use; see docs/writing.md).

    ``load`` returns every Julia ``Dict`` as a ``JuliaDict``. It compares equal to a plain ``dict``
    with the same items (it *is* one), and JAX sees it as a pytree node in insertion order.

    Example:
        >>> from treexchange import JuliaDict
        >>> d = JuliaDict({"lr": 0.1, "epochs": 3})
        >>> isinstance(d, dict), d == {"lr": 0.1, "epochs": 3}, d
        (True, True, JuliaDict({'lr': 0.1, 'epochs': 3}))

    ``julia_type``: the Dict type the file stored (``Dict{String, Float64}``, ``IdDict{Any, Any}``,
    ``Base.ImmutableDict{Symbol, Int64}``), or None for a dict made in Python. The writer keeps
    it where the entries fit it, and otherwise works the type out from the entries.
    """

    __slots__ = ("_julia_type",)

    @property
    def julia_type(self) -> JuliaType | None:
        return getattr(self, "_julia_type", None)

    @julia_type.setter
    def julia_type(self, value: JuliaType | None) -> None:
        self._julia_type = value

    def __repr__(self) -> str:
        return f"JuliaDict({dict.__repr__(self)})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_make_julia_dict, (dict(self), self.julia_type))


def _make_julia_dict(items: dict[Any, Any], julia_type: JuliaType | None) -> JuliaDict:
    out = JuliaDict(items)
    out.julia_type = julia_type
    return out


class _Sentinel:
    """A value with exactly one instance per subclass, which pickles and copies as itself and
    has no truth value (as in Julia, where neither ``missing`` nor ``#undef`` is a Bool)."""

    _name: ClassVar[str]
    _no_truth: ClassVar[str]
    _instance: ClassVar[Any] = None  # set on each subclass (looked up in its own __dict__)

    def __new__(cls) -> Any:
        instance = cls.__dict__.get("_instance")
        if instance is None:
            instance = super().__new__(cls)
            cls._instance = instance
        return instance

    def __repr__(self) -> str:
        return self._name

    def __bool__(self) -> bool:
        raise TypeError(self._no_truth)

    def __reduce__(self) -> str:
        return self._name  # the module-level name: unpickling gives the one instance


class Missing(_Sentinel, TypeParameterValue):
    """Julia's ``missing``. Use the single instance :data:`MISSING`."""

    _name = "MISSING"
    _no_truth = "missing has no truth value (as in Julia)"

    def _julia_param_text(self, *, short: bool, sep: str) -> str:
        return "missing"


MISSING = Missing()
"""The Julia ``missing`` value."""


class Undef(_Sentinel):
    """An undefined reference (Julia prints it ``#undef``): a field of a mutable struct, or an
    element of an array of non-bits values, that was never assigned. Use the single instance
    :data:`UNDEF`.

    It is not a Julia value, so it has no type of its own: ``inspect`` shows it as kind
    ``singleton`` with julia_type ``Union{}`` (the bottom type, which no value has). JLD2 stores
    it as a NULL object reference.

    Example:
        >>> from treexchange import UNDEF, Undef
        >>> UNDEF, Undef() is UNDEF
        (UNDEF, True)
    """

    _name = "UNDEF"
    _no_truth = "#undef has no truth value (reading it is an error in Julia)"


UNDEF = Undef()
"""An undefined reference (Julia's ``#undef``)."""


# The two bounds of type comparison (NTuple expansion, canonical text length) are not Limits
# fields: they never refuse input (past them, types compare by their exact spelling), and the
# comparison runs inside ``==`` and ``hash``, where no caller's Limits is in reach.
_NTUPLE_EXPAND_MAX = 64
"""``NTuple{N,T}`` is compared as ``Tuple{T,...}`` up to this N (longer ones as written)."""


@functools.lru_cache(maxsize=4096)
def canonical_type(t: JuliaType) -> str:
    """One spelling per Julia type, for comparing values: module prefixes Julia prints without
    (``Core.``, ``Base.``) dropped and ``NTuple{N,T}`` spelled ``Tuple{T,...}``, so a type read
    from a Julia 1.6 file (``Core.Tuple{Core.Int64}``) and the same type written by treexchange
    (``Tuple{Int64}``) compare equal. The stored spelling stays in the ``JuliaType`` itself
    (byte identity needs it); only comparison uses this one.

    Example:
        >>> canonical_type(JuliaType.parse("Core.Tuple{Core.Int64,Core.Int64}"))
        'Tuple{Int64,Int64}'
        >>> canonical_type(JuliaType.parse("NTuple{2, Int64}"))
        'Tuple{Int64,Int64}'
    """
    name = _short(t.name)
    params: list[Any] = list(t.params)
    if name == "UnionAll" and len(params) == 1 and not isinstance(params[0], JuliaType):
        # A where type (BSON.jl's reading, ``where_type``) spelled as the ``UnionAll`` value a
        # JLD2 file gives for the same type parameter.
        return _canonical_param(params[0])
    if name == "NTuple" and len(params) == 2 and isinstance(params[0], (int, np.integer)):
        n = int(params[0])
        if 0 <= n <= _NTUPLE_EXPAND_MAX:
            name, params = "Tuple", [params[1]] * n
    if not params:
        return name
    text = name + "{" + ",".join(_canonical_param(p) for p in params) + "}"
    if len(text) > _CANONICAL_MAX_CHARS:
        # A type DAG (Tuple{T,T} nested) doubles its text at every level: stop early.
        raise _TypeTooLarge
    return text


_CANONICAL_MAX_CHARS = 1 << 16


class _TypeTooLarge(Exception):
    """The canonical text of a type would exceed :data:`_CANONICAL_MAX_CHARS`."""


def _canonical_param(p: Any) -> str:
    if isinstance(p, JuliaType):
        return canonical_type(p)
    if isinstance(p, tuple):
        return "(" + ",".join(_canonical_param(x) for x in p) + ",)"
    return _render_param(p, short=True, sep=",")


def same_type(a: JuliaType, b: JuliaType) -> bool:
    """Whether two :class:`JuliaType` name the same Julia type (see :func:`canonical_type`).

    Example:
        >>> same_type(JuliaType.parse("Core.Tuple{Core.Int64}"), JuliaType.parse("Tuple{Int64}"))
        True
        >>> same_type(JuliaType.parse("Main.Foo"), JuliaType.parse("Other.Foo"))
        False
    """
    if a is b or a == b:
        return True
    try:
        return canonical_type(a) == canonical_type(b)
    except _TypeTooLarge:
        return False  # too large to normalize: only the exact spelling compares equal


def _type_hash(t: JuliaType) -> int:
    try:
        return hash(canonical_type(t))
    except _TypeTooLarge:
        return hash(t.name)


def _as_type(type_: JuliaType | str) -> JuliaType:
    return type_ if isinstance(type_, JuliaType) else JuliaType.parse(type_)


class Singleton(TypeParameterValue):
    """A zero-size Julia value other than ``()``/``nothing``/``missing``: a function, an RNG
    singleton, an empty struct. Only its type is stored.

    Example:
        >>> from treexchange import JuliaType, Singleton
        >>> Singleton("NNlib.#relu")
        Singleton('NNlib.#relu')
        >>> Singleton("NNlib.#relu") == Singleton(JuliaType("NNlib.#relu"))
        True
    """

    __slots__ = ("type",)

    def __init__(self, type_: JuliaType | str) -> None:
        self.type = _as_type(type_)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Singleton) and same_type(self.type, other.type)

    def __hash__(self) -> int:
        return hash(("Singleton", _type_hash(self.type)))

    def __repr__(self) -> str:
        return f"Singleton({self.type.qualified()!r})"

    def _julia_param_text(self, *, short: bool, sep: str) -> str:
        if self.type.name == "Core.Type" and len(self.type.params) == 1:
            return _render_param(self.type.params[0], short=short, sep=sep)  # a type as a value
        name = self.type._render(short=short, sep=sep)
        # A function's type prints as "#relu"; the function itself as "relu".
        head, _, last = name.rpartition(".")
        if last.startswith("#") and "{" not in last:
            return (head + "." if head and not short else "") + last[1:]
        return f"{name}()"


class Closure(Singleton):
    """An anonymous function (a closure such as ``x -> reshape(x, :, size(x, 4))``) read from a
    BSON.jl file, which stored it as Julia's compiled code: treexchange keeps only what names it
    and never runs or evaluates anything of it.

    ``type`` is the closure's type (``Main.#3#4``, the name Julia gave it); ``name`` the method's
    name (``#3``), ``module``, ``file`` and ``line`` where it was defined, each ``None`` when the
    file does not say; ``captures`` the values it closed over, in order (``()`` for most), and
    ``capture_names`` their variable names when the file gives them. Without captures it is the
    singleton of its type (what JLD2 writes for a function), equal to that :class:`Singleton`.
    With captures (``(x, y) -> x + downsample(y)`` holds a trained ``downsample``) it is what
    Julia makes of it: an instance of the closure's struct type (``ResNet.#9#10{Flux.Chain{…}}``),
    its fields the captured variables in order. So it is a ``struct`` node (``inspect`` shows the
    captures as its fields), the writers write it as that struct (JLD2 as JLD2.jl does, the
    safetensors / orbax metadata as a struct node), and it equals a closure of the same type
    whose captures are equal, or a :class:`JuliaStruct` of its type whose fields are its captures
    by name and in order (what reading the written file gives). Captures without their names
    cannot be written (the struct's fields would have no names): the writers refuse them.
    ``code`` is the closure written back as one line of Julia (``"x -> reshape(x, :, size(x, 4))"``)
    when its stored code is a single expression of its argument, else ``None``: shown, matched
    against spellings of known functions by the ports (docs/bson.md §Closures), never evaluated;
    it plays no part in equality (nor is it written: JLD2.jl writes a closure's data, not its code).

    Example:
        >>> from treexchange import Closure
        >>> f = Closure("Main.#3#4", name="#3", module="Main", file="REPL[9]", line=8)
        >>> f, f.where
        (Closure('Main.#3#4', defined at REPL[9]:8), 'REPL[9]:8')
    """

    __slots__ = ("_struct", "capture_names", "captures", "code", "file", "line", "module", "name")

    def __init__(
        self,
        type_: JuliaType | str,
        *,
        name: str | None = None,
        module: str | None = None,
        file: str | None = None,
        line: int | None = None,
        captures: tuple[Any, ...] = (),
        capture_names: tuple[str, ...] = (),
        code: str | None = None,
    ) -> None:
        super().__init__(type_)
        self.code = code
        self.name = name
        self.module = module
        self.file = file
        self.line = line
        self.captures = tuple(captures)
        self.capture_names = tuple(capture_names)
        self._struct: tuple[tuple[Any, ...], tuple[str, ...], JuliaStruct | None] | None = None

    def __eq__(self, other: object) -> bool:
        # (captures are data: equal closures capture equal values, as values_equal says; a
        # closure with captures is a struct, equal to the struct its written file reads back as)
        if isinstance(other, Closure) and (self.captures or other.captures):
            return values_equal(self, other)
        if self.captures and isinstance(other, (Singleton, JuliaStruct)):
            return values_equal(self, other)
        return super().__eq__(other)

    def __hash__(self) -> int:
        return super().__hash__()  # (the type's: equal closures have one type)

    @property
    def where(self) -> str | None:
        """``file:line`` where the closure was defined, or ``None`` when the file does not say."""
        if self.file is None:
            return None
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def __repr__(self) -> str:
        where = self.where
        at = f", defined at {where}" if where else ""
        return f"Closure({self.type.qualified()!r}{at})"


def closure_struct(value: Closure) -> JuliaStruct | None:
    """The struct a closure with captures is in Julia: its type, its captures as the fields
    named by ``capture_names`` (``None`` when the file did not give the names, or it captured
    nothing). One view per closure, made once (kept while its captures stay the same tuple): the
    writer meets the value several times (typing it, checking a field, writing it) and tells
    objects apart by identity.

    Example:
        >>> c = Closure("Main.#3#4{Core.Int64}", captures=(2,), capture_names=("n",))
        >>> closure_struct(c), closure_struct(c) is closure_struct(c)
        (JuliaStruct('Main.#3#4{Int64}', n=2), True)
    """
    held = value._struct
    if held is not None and held[0] is value.captures and held[1] is value.capture_names:
        return held[2]
    names, captures = value.capture_names, value.captures
    ok = bool(captures) and len(names) == len(captures) and len(set(names)) == len(names)
    struct = JuliaStruct(value.type, zip(names, captures)) if ok else None
    value._struct = (captures, names, struct)
    return struct


_local = threading.local()


def _comparing() -> set[tuple[int, int]]:
    """The pairs of structs being compared on this thread (cycle guard of ``JuliaStruct.__eq__``)."""
    busy = getattr(_local, "comparing", None)
    if busy is None:
        busy = _local.comparing = set()
    return busy


class JuliaStruct(TypeParameterValue):
    """Any Julia struct without a more specific Python face: its type and its fields in order.

    ``fields`` holds every field, including zero-size ones (as ``()``, ``None``, :class:`Singleton`).
    ``layout`` is an opaque description of how the struct was laid out on disk when it was read
    (used by the writer to re-encode it exactly); it plays no part in equality.

    ``mutable`` says the struct's type is a Julia ``mutable struct``: JLD2 then writes every
    instance as a dataset of its own, referenced from wherever it appears, and one Python object
    appearing twice is one Julia object (one dataset). The reader sets it when the file shows it
    (the struct is referenced from a field or array element declared with its own concrete type,
    referenced twice, or part of a cycle); ``False`` means "not known to be mutable". It plays
    no part in equality. A mutable struct may contain itself (a cycle); equality and ``repr``
    handle that.

    Example:
        >>> from treexchange import JuliaStruct
        >>> s = JuliaStruct("Main.Foo", {"a": 1, "b": None})
        >>> s.type.name, s["a"], list(s.fields)
        ('Main.Foo', 1, ['a', 'b'])
        >>> node = JuliaStruct("Main.Node", {"value": 1, "parent": None}, mutable=True)
        >>> node.fields["parent"] = node  # a cycle: the node is its own parent
        >>> node["parent"] is node, node == node
        (True, True)
    """

    __slots__ = ("fields", "layout", "mutable", "type")

    def __init__(
        self,
        type_: JuliaType | str,
        fields: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
        *,
        layout: Any = None,
        mutable: bool = False,
    ) -> None:
        self.type = _as_type(type_)
        self.fields: dict[str, Any] = dict(fields.items() if isinstance(fields, Mapping) else fields)
        self.layout = layout
        self.mutable = mutable

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JuliaStruct):
            return NotImplemented
        if self is other:
            return True
        if not (same_type(self.type, other.type) and list(self.fields) == list(other.fields)):
            return False
        # Cycles (mutable structs that contain themselves): a pair already being compared is
        # taken as equal here; the comparison of the rest of the two graphs decides.
        busy = _comparing()
        pair = (id(self), id(other))
        if pair in busy:
            return True
        busy.add(pair)
        try:
            return all(_values_equal(v, other.fields[k]) for k, v in self.fields.items())
        finally:
            busy.discard(pair)

    __hash__ = None  # type: ignore[assignment]

    @reprlib.recursive_repr("JuliaStruct(...)")
    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.fields.items())
        return f"JuliaStruct({str(self.type)!r}, {inner})"

    def _julia_param_text(self, *, short: bool, sep: str) -> str:
        """``Foo{T} where T`` for a ``UnionAll``, ``T`` for a ``TypeVar``, else the constructor
        call Julia shows: ``UnitRange{Int64}(1, 320)``."""

        def r(x: Any) -> str:
            return _render_param(x, short=short, sep=sep)

        fields = self.fields
        if self.type.name == "Core.TypeVar" and "name" in fields:
            return str(fields["name"])
        if self.type.name == "Core.UnionAll" and {"var", "body"} <= set(fields):
            return f"{r(fields['body'])} where {r(fields['var'])}"
        return f"{self.type._render(short=short, sep=sep)}({sep.join(r(v) for v in fields.values())})"


class JuliaBits(TypeParameterValue):
    """A value of a Julia primitive bits type with no numpy equivalent (an ``@enum``, ``Char``,
    an ``InlineStrings.String15`` of a DataFrame column read by CSV.jl): its type and raw
    little-endian bytes, kept as the file has them (``save`` writes them back unchanged).

    Example:
        >>> from treexchange import JuliaBits
        >>> JuliaBits("Main.Color", b"\\x01\\x00\\x00\\x00").as_int()
        1
        >>> JuliaBits("InlineStrings.String3", b"\\x02\\x00iH").as_str()
        'Hi'
    """

    __slots__ = ("data", "type")

    def __init__(self, type_: JuliaType | str, data: bytes) -> None:
        self.type = _as_type(type_)
        self.data = bytes(data)

    def as_int(self) -> int:
        """The bytes read as a little-endian signed integer (the value of an ``@enum``)."""
        return int.from_bytes(self.data, "little", signed=True)

    def as_str(self) -> str:
        """The text of a ``Char`` or of an InlineStrings.jl string (``String1`` … ``String255``,
        what CSV.jl reads text columns as), as Julia's ``String(x)`` gives it.

        An InlineString of ``N`` code units is ``N + 1`` bytes: its length in the least
        significant byte, its code units from the most significant byte down (so the file's
        little-endian bytes hold them reversed, at the end).

        Raises:
            ValueError: a value of any other type, a length byte larger than the type holds, or
                bytes that are not UTF-8 (Julia strings may hold such bytes; ``data`` has them).

        Example:
            >>> from treexchange import JuliaBits
            >>> [JuliaBits(t, b).as_str() for t, b in [("InlineStrings.String7", b"\\x05\\x00\\x00fitcA"),
            ...                                        ("Core.Char", b"\\x00\\x00\\x00a")]]
            ['Actif', 'a']
        """
        if _is_inline_string(self):
            raw = _inline_string_bytes(self)
            if raw is None:
                length, held = self.data[0], len(self.data) - 1
                message = f"the {self.type} value's length byte {length} is more than it holds ({held})"
                raise ValueError(message)
        elif _short(self.type.name) == "Char" and len(self.data) == 4:
            raw = self.data[::-1].rstrip(b"\x00") or b"\x00"
        else:
            raise ValueError(f"a {self.type} value is not text (only a Char or an InlineStrings string is)")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"the {self.type} value's bytes {raw!r} are not UTF-8") from None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JuliaBits) and self.data == other.data and same_type(self.type, other.type)

    def __hash__(self) -> int:
        return hash((_type_hash(self.type), self.data))

    def __repr__(self) -> str:
        return f"JuliaBits({str(self.type)!r}, {self.data!r})"

    def shown(self) -> str:
        """The value as Julia's ``show`` prints it without the type: a ``Char`` as ``'a'``, an
        InlineStrings.jl string as its text in quotes (``"Actif"``, escaped as ``inspect`` shows
        a ``String``), any other as its bits in hex, most significant byte first (``0x3c00``:
        Julia prints a primitive type's value ``P16(0x3c00)``). The bytes are all the file
        gives: an ``@enum`` value is its number in hex, a struct stored as raw bits its packed
        fields; an InlineString whose bytes are not valid text is shown in hex too.

        Example:
            >>> from treexchange import JuliaBits
            >>> JuliaBits("Main.P16", b"\\x00\\x3c").shown()
            '0x3c00'
            >>> JuliaBits("Core.Char", b"\\x00\\x00\\x00a").shown()
            "'a'"
            >>> JuliaBits("InlineStrings.String7", b"\\x05\\x00\\x00fitcA").shown()
            '"Actif"'
        """
        if _short(self.type.name) == "Char" and len(self.data) == 4:
            return self._char_text()
        if _is_inline_string(self):
            try:
                return json.dumps(self.as_str(), ensure_ascii=False)
            except ValueError:  # (a length byte past the type's size, or bytes that are not UTF-8)
                pass
        return "0x" + self.data[::-1].hex()

    def _julia_param_text(self, *, short: bool, sep: str) -> str:
        """A ``Char`` as Julia shows it (``'a'``); any other bits value (and a ``Char`` in the
        stored spelling) as its ``repr``."""
        if not (short and _short(self.type.name) == "Char" and len(self.data) == 4):
            return repr(self)
        return self._char_text()

    def _char_text(self) -> str:
        # A Char is its UTF-8 bytes left-aligned in a big-endian UInt32 (stored little-endian).
        raw = self.data[::-1].rstrip(b"\x00") or b"\x00"
        try:
            char = raw.decode("utf-8")
        except UnicodeDecodeError:
            return "'" + "".join(f"\\x{b:02x}" for b in raw) + "'"
        if char.isprintable() and char not in "'\\":
            return f"'{char}'"
        special = {"'": "\\'", "\\": "\\\\"}
        return "'" + special.get(char, char.encode("unicode_escape").decode("ascii")) + "'"


# InlineStrings.jl's fixed-size strings: ``String{N}`` is a primitive type of N + 1 bytes; before
# InlineStrings 1.4.3 (its PR #80) ``String1`` was one byte, its one code unit, with no length.
_INLINE_STRING_SIZES: dict[str, tuple[int, ...]] = {
    f"InlineStrings.String{n}": (n + 1,) for n in (3, 7, 15, 31, 63, 127, 255)
}
_INLINE_STRING_SIZES["InlineStrings.String1"] = (2, 1)


def _is_inline_string(bits: JuliaBits) -> bool:
    return len(bits.data) in _INLINE_STRING_SIZES.get(bits.type.name, ()) and not bits.type.params


def _inline_string_bytes(bits: JuliaBits) -> bytes | None:
    """The code units of an InlineString's bytes (length byte first, the units reversed at the
    end; an old one-byte ``String1`` is its code unit); None when the length byte says more than
    the type holds."""
    data = bits.data
    if len(data) == 1:
        return data
    n = data[0]
    if n >= len(data):
        return None
    return data[::-1][:n]


class JuliaArray:
    """A Julia array whose elements are not plain numbers: ``Vector{Symbol}``, ``Vector{String}``,
    ``Vector{Union{Nothing, Float64}}``, ``Matrix{Any}``, arrays of structs...

    ``eltype`` is the Julia element type; ``data`` is a numpy *object* array in Julia's shape
    (``Vector{Any}`` itself is a plain ``list``).

    ``len()``, iteration and integer indexing follow Julia's ``length``, ``for x in A`` and
    linear indexing (0-based here): every element, in column-major order, as the lazy node of the
    same array and ``inspect`` paths count them. A tuple index (``a[i, j]``) or a slice indexes
    ``data`` in Julia's shape.

    Example:
        >>> import numpy as np
        >>> from treexchange import JuliaArray, Symbol
        >>> a = JuliaArray("Core.Symbol", [Symbol("a"), Symbol("b")])
        >>> a.shape, a[1], len(a)
        ((2,), Symbol('b'), 2)
        >>> m = JuliaArray("Core.String", np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object))
        >>> m.shape, len(m), list(m), m[1], m[1, 0]
        ((2, 3), 6, ['a', 'd', 'b', 'e', 'c', 'f'], 'd', 'd')
    """

    __slots__ = ("data", "eltype")

    def __init__(self, eltype: JuliaType | str, data: Any) -> None:
        self.eltype = _as_type(eltype)
        if isinstance(data, np.ndarray) and data.dtype == object:
            self.data = data
        else:
            items = list(data)
            arr = np.empty(len(items), dtype=object)
            arr[:] = items
            self.data = arr

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    def __len__(self) -> int:
        return int(self.data.size)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool) and self.data.ndim != 1:
            flat = self.data.reshape(-1, order="F")
            return flat[int(index)]
        return self.data[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.data.ravel(order="F"))

    def tolist(self) -> list[Any]:
        """Elements in Julia (column-major) order."""
        return list(self.data.ravel(order="F"))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, JuliaArray):
            return NotImplemented
        return (
            same_type(self.eltype, other.eltype)
            and self.shape == other.shape
            and all(_values_equal(a, b) for a, b in zip(self, other))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"JuliaArray({str(self.eltype)!r}, {self.tolist()!r})"


class Int128(int):
    """A Julia ``Int128`` (an ``int`` that remembers its width): ``str`` is the number, ``repr``
    names the type.

    Example:
        >>> from treexchange import Int128
        >>> x = Int128(-5)
        >>> x, str(x), x + 1 == -5 + 1
        (Int128(-5), '-5', True)
    """

    __slots__ = ()
    julia_name = "Core.Int128"

    def __repr__(self) -> str:
        return f"Int128({int(self)})"

    def __str__(self) -> str:
        return int.__repr__(self)  # the decimal text, as for an int (repr names the type)


class UInt128(int):
    """A Julia ``UInt128`` (an ``int`` that remembers its width): ``str`` is the number, ``repr``
    names the type.

    Example:
        >>> from treexchange import UInt128
        >>> x = UInt128(2**127)
        >>> x, str(x), x + 1 == 2**127 + 1
        (UInt128(170141183460469231731687303715884105728), '170141183460469231731687303715884105728', True)
    """

    __slots__ = ()
    julia_name = "Core.UInt128"

    def __repr__(self) -> str:
        return f"UInt128({int(self)})"

    def __str__(self) -> str:
        return int.__repr__(self)  # the decimal text, as for an int (repr names the type)


class BigInt(int):
    """A Julia ``BigInt`` (an ``int`` that remembers it is one): what a ``BigInt`` in a file reads
    as, and what ``save`` writes as one whatever its size (a plain ``int`` too wide for ``Int128``
    is written as a ``BigInt`` too).

    ``julia_name`` is the name the type is written with: ``Base.GMP.BigInt``, as JLD2 writes it,
    unless the value was read from a file that spelled it otherwise (``Base.BigInt``), so a file
    re-encodes byte for byte.

    Example:
        >>> from treexchange import BigInt
        >>> BigInt(2**70), str(BigInt(-5)), BigInt(5) + 1, BigInt(5, "Base.BigInt").julia_name
        (BigInt(1180591620717411303424), '-5', 6, 'Base.BigInt')
    """

    julia_name = BIGINT_NAME

    def __new__(cls, value: Any = 0, julia_name: str | None = None) -> BigInt:
        self = super().__new__(cls, value)
        if julia_name is not None and julia_name != BIGINT_NAME:
            if not is_bigint_name(julia_name):
                raise ValueError(f"{julia_name!r} is not a name of Julia's BigInt")
            self.julia_name = julia_name
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (BigInt, (int(self), self.julia_name))

    def __repr__(self) -> str:
        return f"BigInt({int(self)})"

    def __str__(self) -> str:
        return int.__repr__(self)  # the decimal text, as for an int


# The decimal text of a number as Julia's ``parse(BigFloat, s)`` takes it (and Python's ``float``
# and ``Decimal``): digits with an optional point and exponent, or infinity / NaN.
_BIGFLOAT_TEXT = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|(?i:inf|infinity|nan))")


class BigFloat:
    """A Julia ``BigFloat``: the decimal text JLD2 stores it as (``string(x)``: as many digits
    as its precision needs to read back exactly), kept as written, so ``save`` writes the same
    bytes again.

    The file holds no precision: JLD2.jl parses the text at the reading session's precision (256
    bits unless ``setprecision`` says otherwise), and so does Julia for a ``BigFloat`` written
    here. ``float(x)`` is the nearest double, ``x.to_decimal()`` the exact value of the text (a
    :class:`decimal.Decimal`), ``str(x)`` the text. Equal to another ``BigFloat``, an ``int``, a
    ``float`` or a ``Decimal`` of the same value (and to a ``NaN`` of the same text).
    ``julia_name`` is the name the type is written with: ``Base.MPFR.BigFloat``, as JLD2 writes
    it, unless the value was read under another (``Base.BigFloat``).

    Example:
        >>> from treexchange import BigFloat
        >>> x = BigFloat("3.141592653589793238462643383279502884197169399375105820974944592307816406286198")
        >>> float(x), str(x)[:12], x.to_decimal() > 3, x == BigFloat("3.1416")
        (3.141592653589793, '3.1415926535', True, False)
        >>> BigFloat(2.5), BigFloat(10**30) == 10**30, BigFloat("1.0e+100") == BigFloat("1e100")
        (BigFloat('2.5'), True, True)
    """

    __slots__ = ("julia_name", "text")
    text: str
    julia_name: str

    def __init__(self, value: Any = "0", julia_name: str | None = None) -> None:
        if isinstance(value, BigFloat):
            text = value.text
            julia_name = value.julia_name if julia_name is None else julia_name
        elif isinstance(value, str):
            text = str(value)
            if _BIGFLOAT_TEXT.fullmatch(text) is None:
                raise ValueError(f"{text[:60]!r} is not the decimal text of a number")
        elif isinstance(value, (bool, np.bool_)):
            raise TypeError("a Bool is not a BigFloat")
        elif isinstance(value, (int, np.integer)):
            text = str(int(value))
        elif isinstance(value, (float, np.floating)):
            f = float(value)
            text = "NaN" if math.isnan(f) else ("-Inf" if f < 0 else "Inf") if math.isinf(f) else repr(f)
        elif _is_decimal(value):
            text = (
                "NaN"
                if value.is_nan()
                else ("-Inf" if value < 0 else "Inf")
                if value.is_infinite()
                else str(value)
            )
        else:
            raise TypeError(f"cannot make a BigFloat of {type(value).__name__}")
        name = BIGFLOAT_NAME if julia_name is None else julia_name
        if name != BIGFLOAT_NAME and not is_bigfloat_name(name):
            raise ValueError(f"{name!r} is not a name of Julia's BigFloat")
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "julia_name", name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("BigFloat is immutable")

    def to_decimal(self) -> Any:
        """The exact value of the text, a :class:`decimal.Decimal` (``Decimal('Infinity')`` for
        ``Inf``, ``Decimal('NaN')``)."""
        import decimal  # (here: importing treexchange does not load decimal)

        return decimal.Decimal(self.text)

    def __float__(self) -> float:
        return float(self.text)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BigFloat):
            return self.text == other.text or bool(self.to_decimal() == other.to_decimal())
        if isinstance(other, (bool, np.bool_)):
            return NotImplemented
        if isinstance(other, (int, float)) or _is_decimal(other):
            return bool(self.to_decimal() == other)
        return NotImplemented

    def __hash__(self) -> int:
        d = self.to_decimal()
        return hash("NaN") if d.is_nan() else hash(d)  # equal numbers hash alike (int, float)

    def __reduce__(self) -> tuple[Any, ...]:
        return (BigFloat, (self.text, self.julia_name))

    def __repr__(self) -> str:
        return f"BigFloat({self.text!r})"

    def __str__(self) -> str:
        return self.text


def value_children(value: Any) -> list[tuple[str | int, Any]] | None:
    """The children of a container value with their path segments (field names, Dict keys (other
    than text and Int ones as their text), 1-based positions in a Tuple, Vector or JuliaArray), or
    None for a leaf (arrays included).

    Example:
        >>> value_children(NamedTuple(w=1, b=(2, 3)))
        [('w', 1), ('b', (2, 3))]
        >>> value_children((2, 3)), value_children(2)
        ([(1, 2), (2, 3)], None)
    """
    if isinstance(value, JuliaStruct):
        return list(value.fields.items())
    if isinstance(value, Closure) and value.captures:
        # (a struct in Julia: its captured values, by name where the file gave the names)
        names = value.capture_names if len(value.capture_names) == len(value.captures) else ()
        return list(zip(names or range(1, len(value.captures) + 1), value.captures))
    if isinstance(value, (NamedTuple, dict)):  # (a Dict's Int keys stay Ints: value_at finds them so)
        return [(_key_segment(k), v) for k, v in value.items()]
    if isinstance(value, (tuple, list, JuliaArray)):
        return list(enumerate(value, 1))
    return None


def each_value(
    value: Any, path: tuple[str | int, ...] = (), *, limit: int | None = None
) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """``(path, value)`` of ``value`` and of everything inside it (:func:`value_children`), each
    object once (a shared one at its first path, a cycle not followed again), at most ``limit``
    objects. Iterative: any depth.

    Example:
        >>> [p for p, _ in each_value(NamedTuple(w=1, b=(2, 3)))]
        [(), ('w',), ('b',), ('b', 1), ('b', 2)]
    """
    seen: set[int] = set()
    todo: list[tuple[tuple[str | int, ...], Any]] = [(tuple(path), value)]
    while todo:
        at, v = todo.pop()
        if id(v) in seen:
            continue
        if limit is not None and len(seen) >= limit:
            return
        seen.add(id(v))
        yield at, v
        children = value_children(v)
        if children:
            todo.extend(((*at, k), child) for k, child in reversed(children))


def _key_segment(key: Any) -> str | int:
    if isinstance(key, (np.integer, int)) and not isinstance(key, bool):
        return int(key)  # (a file's Int64 keys read as numpy integers)
    return key if isinstance(key, str) else str(key)


def _is_decimal(value: Any) -> bool:
    """Whether ``value`` is a :class:`decimal.Decimal` (without importing ``decimal``: a value
    can only be one once it is loaded)."""
    decimal = sys.modules.get("decimal")
    return decimal is not None and isinstance(value, decimal.Decimal)


def _values_equal(a: Any, b: Any) -> bool:
    """Structural equality that treats arrays by value, dtype and shape (NaN == NaN).

    Iterative (an explicit stack, so any depth the reader admits compares without touching
    Python's recursion limit), and each pair of containers is compared once (memoised by
    identity): a shared sub-tree (a DAG of references, which a file may use to make a tree
    exponentially large) costs its size once, and a cycle compares as equal where it closes.
    """
    seen: set[tuple[int, int]] = set()
    keep: list[Any] = []  # the compared containers stay alive, so their ids stay unique
    stack: list[tuple[Any, Any]] = [(a, b)]
    while stack:
        x, y = stack.pop()
        children = _children_if_equal_shells(x, y)
        if children is None:
            if not _leaves_equal(x, y):
                return False
            continue
        if children is False:
            return False
        key = (id(x), id(y))
        if key in seen:
            continue
        seen.add(key)
        keep.append((x, y))
        stack.extend(children)
    return True


def _children_if_equal_shells(x: Any, y: Any) -> list[tuple[Any, Any]] | Literal[False] | None:
    """For two containers: ``False`` if their shells differ, else the pairs of children to
    compare; ``None`` if ``x`` and ``y`` are not both containers (compare them as leaves)."""
    if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
        return None
    if isinstance(x, (tuple, list)) and isinstance(y, (tuple, list)):
        if type(x) is not type(y) or len(x) != len(y):
            return False
        return list(zip(x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        if list(x) != list(y):
            return False
        return [(x[k], y[k]) for k in x]
    if isinstance(x, NamedTuple) and isinstance(y, NamedTuple):
        if list(x._data) != list(y._data):
            return False
        return [(x._data[k], y._data[k]) for k in x._data]
    if isinstance(x, JuliaStruct) and isinstance(y, JuliaStruct):
        if not same_type(x.type, y.type) or list(x.fields) != list(y.fields):
            return False
        return [(v, y.fields[k]) for k, v in x.fields.items()]
    if (isinstance(x, Closure) and x.captures) or (isinstance(y, Closure) and y.captures):
        return _closure_children(x, y)
    if (isinstance(x, JuliaStruct) and type(y) is Singleton) or (
        type(x) is Singleton and isinstance(y, JuliaStruct)
    ):
        # A struct whose fields are all zero-size (`ByRow{typeof(f)}` holding the function `f`) is
        # itself a zero-size type, its instance fixed by the type: JLD2 stores none of it and reads
        # it back as the singleton, while BSON.jl stores its fields.
        struct = x if isinstance(x, JuliaStruct) else y
        return [] if same_type(x.type, y.type) and _zero_size(struct) else False
    if isinstance(x, JuliaArray) and isinstance(y, JuliaArray):
        if not same_type(x.eltype, y.eltype) or x.shape != y.shape:
            return False
        return list(zip(x, y))
    return None


def _closure_children(x: Any, y: Any) -> list[tuple[Any, Any]] | Literal[False]:
    """:func:`_children_if_equal_shells` for a closure with captures and another value. A
    closure's captured values are data (``(x, y) -> x + downsample(y)`` holds the trained
    ``downsample``): two closures are equal when those are too. In Julia the closure is an
    instance of its struct type, fields the captured variables, which is how the writers store
    it and how its file reads back: a :class:`JuliaStruct` of that type with those fields (by
    name, in order), or the :class:`Singleton` of the type when every capture is zero-size (a
    captured function: JLD2 stores no data for such a struct)."""
    closure, other = (x, y) if isinstance(x, Closure) and x.captures else (y, x)
    if not isinstance(other, (Closure, JuliaStruct, Singleton)) or not same_type(closure.type, other.type):
        return False
    if isinstance(other, Closure):
        if len(closure.captures) != len(other.captures):
            return False
        return list(zip(closure.captures, other.captures))
    if isinstance(other, JuliaStruct):
        names = list(closure.capture_names)
        if len(names) != len(closure.captures) or list(other.fields) != names:
            return False
        return list(zip(closure.captures, other.fields.values()))
    return [] if type(other) is Singleton and _zero_size(closure.captures) else False


def _zero_size(value: Any) -> bool:
    """Whether ``value`` is of a zero-size Julia type: a singleton (a function, ``nothing``, a
    closure capturing nothing), or a tuple, NamedTuple or struct of such values only."""
    todo = [value]
    while todo:
        v = todo.pop()
        if v is None or type(v) is Singleton or (isinstance(v, Closure) and not v.captures):
            continue
        if isinstance(v, Closure):
            todo.extend(v.captures)  # (a struct of its captures)
        elif isinstance(v, tuple):
            todo.extend(v)
        elif isinstance(v, NamedTuple):
            todo.extend(v._data.values())
        elif isinstance(v, JuliaStruct) and not v.mutable:
            todo.extend(v.fields.values())
        else:
            return False
    return True


def _leaves_equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind in "fc":
            return bool(np.array_equal(a, b, equal_nan=True))
        return bool(np.array_equal(a, b))
    if isinstance(a, np.generic) and isinstance(b, np.generic):
        if a.dtype != b.dtype:
            return False
        if a.dtype.kind in "fc" and np.isnan(a) and np.isnan(b):
            return True
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return a is b


def values_equal(a: Any, b: Any) -> bool:
    """Whether two value trees are equal, arrays compared by dtype, shape and contents.

    Example:
        >>> import numpy as np
        >>> from treexchange import NamedTuple, values_equal
        >>> values_equal(NamedTuple(w=np.zeros(2, np.float32)), NamedTuple(w=np.zeros(2, np.float32)))
        True
        >>> values_equal(np.zeros(2, np.float32), np.zeros(2, np.float64))
        False
    """
    return _values_equal(a, b)


# --- JAX pytree registration (without importing JAX) ---------------------------------------

_registered = False
_register_lock = threading.Lock()


def _register_with_jax(jax_tree_util: ModuleType) -> None:
    global _registered
    with _register_lock:
        if _registered:
            return
        dict_key = jax_tree_util.DictKey

        def nt_flatten_with_keys(nt: NamedTuple) -> tuple[Any, Any]:
            keys = tuple(nt._data)
            return [(dict_key(k), nt._data[k]) for k in keys], keys

        def nt_flatten(nt: NamedTuple) -> tuple[Any, Any]:
            keys = tuple(nt._data)
            return [nt._data[k] for k in keys], keys

        def nt_unflatten(keys: tuple[str, ...], children: Iterable[Any]) -> NamedTuple:
            return NamedTuple(zip(keys, children))

        jax_tree_util.register_pytree_with_keys(NamedTuple, nt_flatten_with_keys, nt_unflatten, nt_flatten)

        def st_flatten_with_keys(s: JuliaStruct) -> tuple[Any, Any]:
            keys = tuple(s.fields)
            return [(dict_key(k), s.fields[k]) for k in keys], (s.type, keys, s.layout)

        def st_flatten(s: JuliaStruct) -> tuple[Any, Any]:
            keys = tuple(s.fields)
            return [s.fields[k] for k in keys], (s.type, keys, s.layout)

        def st_unflatten(aux: tuple[Any, ...], children: Iterable[Any]) -> JuliaStruct:
            type_, keys, layout = aux
            return JuliaStruct(type_, zip(keys, children), layout=layout)

        jax_tree_util.register_pytree_with_keys(JuliaStruct, st_flatten_with_keys, st_unflatten, st_flatten)

        def arr_flatten(a: JuliaArray) -> tuple[Any, Any]:
            return list(a.data.ravel(order="F")), (a.eltype, a.shape)

        def arr_unflatten(aux: tuple[Any, ...], children: Iterable[Any]) -> JuliaArray:
            eltype, shape = aux
            items = list(children)
            data = np.empty(len(items), dtype=object)
            data[:] = items
            return JuliaArray(eltype, data.reshape(shape, order="F"))

        jax_tree_util.register_pytree_node(JuliaArray, arr_flatten, arr_unflatten)

        # Insertion order (a Julia Dict's keys may not be sortable: Symbols and Ints mixed). The
        # keys alone are the structure: the Dict type a file stored (julia_type) is not carried
        # through a tree_map. Carried, it would have to be compared too (jax.jit rebuilds outputs
        # from the structure it cached), and every loaded Dict has one: a tree_map over a loaded
        # Dict and a Python-made one with the same keys would then be refused.
        def jd_flatten_with_keys(d: JuliaDict) -> tuple[Any, Any]:
            keys = tuple(d)
            return [(dict_key(k), d[k]) for k in keys], keys

        def jd_flatten(d: JuliaDict) -> tuple[Any, Any]:
            keys = tuple(d)
            return [d[k] for k in keys], keys

        def jd_unflatten(keys: tuple[Any, ...], children: Iterable[Any]) -> JuliaDict:
            return JuliaDict(zip(keys, children))

        jax_tree_util.register_pytree_with_keys(JuliaDict, jd_flatten_with_keys, jd_unflatten, jd_flatten)
        _registered = True


class _JaxImportHook:
    """Registers our pytree nodes right after ``jax.tree_util`` is first imported.

    A meta path finder by protocol (``find_spec``), not by subclassing ``importlib.abc.MetaPathFinder``:
    importing ``importlib.abc`` pulls in ``importlib.resources``, ``tempfile``, ``shutil`` and ``lzma``,
    a sixth of what ``import treexchange`` would cost (docs/performance.md)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "jax.tree_util":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        original_exec = loader.exec_module  # type: ignore[attr-defined]

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            _register_with_jax(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _install_jax_hook() -> None:
    if "jax.tree_util" in sys.modules:
        _register_with_jax(sys.modules["jax.tree_util"])
    elif not any(isinstance(f, _JaxImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _JaxImportHook())


_install_jax_hook()
