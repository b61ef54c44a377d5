"""What a value-model value *is* on the Julia side: its node kind and its Julia type.

Shared by the writer (which Julia type to commit), the schema (which kind a node has), ``inspect``
(what to print) and the JAX bridge (what a PyTree leaf becomes). The kinds are those of the
``inspect --json`` contract: ``namedtuple``, ``tuple``, ``vector``, ``dict``, ``struct``, ``array``,
``number``, ``bool``, ``string``, ``symbol``, ``singleton``.

Types are returned in canonical spelling (``Core.Float32``, ``Core.Tuple{...}``,
``Core.NamedTuple{(:a, :b),Core.Tuple{...}}``); the writer maps them to the exact spelling JLD2
stores where that differs.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from operator import attrgetter
from typing import Any, Literal, Protocol, TypeVar

import ml_dtypes
import numpy as np

from ._errors import ConversionError, PathSegment, TreePath, UnsupportedError
from ._juliatype import BIGFLOAT_NAME, BIGINT_NAME, JuliaType
from ._values import (
    MISSING,
    UNDEF,
    BigFloat,
    BigInt,
    Closure,
    Int128,
    JuliaArray,
    JuliaBits,
    JuliaDict,
    JuliaStruct,
    NamedTuple,
    Singleton,
    Symbol,
    UInt128,
    closure_struct,
)


def closure_as_struct(value: Closure, path: TreePath) -> JuliaStruct:
    """The struct a :class:`~treexchange.Closure` with captured values is in Julia (its type, the
    captures as fields named by ``capture_names``: ``(x, y) -> x + downsample(y)`` holds a
    trained ``downsample``), which the writers write in its place. Without the names (a file that
    did not give them) the struct's fields would have none: UnsupportedError, rather than writing
    the closure as its type alone and losing them."""
    struct = closure_struct(value)
    if struct is None:
        raise UnsupportedError(
            f"the closure {value.type.basename} holds {len(value.captures)} captured values without "
            "their names, which treexchange writes as the fields of its struct type: they cannot be "
            "written (and are not dropped). Take them out (Closure.captures) or leave the closure out",
            path=path,
        )
    return struct


Kind = Literal[
    "namedtuple",
    "tuple",
    "vector",
    "dict",
    "struct",
    "array",
    "number",
    "bool",
    "string",
    "symbol",
    "singleton",
]

ANY = JuliaType("Core.Any")
NOTHING = JuliaType("Core.Nothing")
MISSING_TYPE = JuliaType("Base.Missing")
EMPTY_TUPLE = JuliaType("Core.Tuple")
STRING = JuliaType("Core.String")
SYMBOL = JuliaType("Core.Symbol")
BOOL = JuliaType("Core.Bool")
DATATYPE = JuliaType("Core.DataType")
INT64 = JuliaType("Core.Int64")
FLOAT64 = JuliaType("Core.Float64")
INT128 = JuliaType("Core.Int128")
UINT128 = JuliaType("Core.UInt128")
BIGINT = JuliaType(BIGINT_NAME)
BIGFLOAT = JuliaType(BIGFLOAT_NAME)
COMPLEX_F64 = JuliaType("Base.Complex", (FLOAT64,))
VECTOR_ANY = JuliaType("Core.Array", (ANY, np.int64(1)))
# Julia >= 1.11 defines BFloat16 in Core; BFloat16s.jl re-exports it there.
BFLOAT16 = JuliaType("Core.BFloat16")
# The bottom type ``Union{}``: the element type of an array known to hold nothing, and what
# ``julia_type_of(UNDEF)`` answers (an undefined reference holds no value of any type).
BOTTOM = JuliaType("Core.Union")

_BFLOAT16_DTYPE = np.dtype(ml_dtypes.bfloat16)

_DTYPE_TO_JULIA: dict[np.dtype, JuliaType] = {
    np.dtype(np.bool_): BOOL,
    np.dtype(np.int8): JuliaType("Core.Int8"),
    np.dtype(np.int16): JuliaType("Core.Int16"),
    np.dtype(np.int32): JuliaType("Core.Int32"),
    np.dtype(np.int64): INT64,
    np.dtype(np.uint8): JuliaType("Core.UInt8"),
    np.dtype(np.uint16): JuliaType("Core.UInt16"),
    np.dtype(np.uint32): JuliaType("Core.UInt32"),
    np.dtype(np.uint64): JuliaType("Core.UInt64"),
    np.dtype(np.float16): JuliaType("Core.Float16"),
    np.dtype(np.float32): JuliaType("Core.Float32"),
    np.dtype(np.float64): FLOAT64,
    np.dtype(np.complex64): JuliaType("Base.Complex", (JuliaType("Core.Float32"),)),
    np.dtype(np.complex128): COMPLEX_F64,
    _BFLOAT16_DTYPE: BFLOAT16,
}
_JULIA_TO_DTYPE: dict[str, np.dtype] = {t.qualified(): d for d, t in _DTYPE_TO_JULIA.items()}
_JULIA_TO_DTYPE["BFloat16s.BFloat16"] = _BFLOAT16_DTYPE


def julia_eltype(dtype: np.dtype | type, *, path: Sequence[PathSegment] = ()) -> JuliaType:
    """The Julia element type of a numpy dtype (byte order ignored).

    Example:
        >>> str(julia_eltype(np.float32)), str(julia_eltype(np.complex128))
        ('Float32', 'Complex{Float64}')
    """
    dt = np.dtype(dtype)
    if dt.byteorder not in ("=", "|"):
        dt = dt.newbyteorder("=")
    try:
        return _DTYPE_TO_JULIA[dt]
    except KeyError:
        raise ConversionError(f"numpy dtype {dt} has no Julia element type", path=path) from None


def numpy_dtype(julia_type: JuliaType) -> np.dtype | None:
    """The numpy dtype of a Julia number type, or ``None`` when there is none.

    Example:
        >>> numpy_dtype(JuliaType.parse("Core.Float32"))
        dtype('float32')
        >>> numpy_dtype(JuliaType.parse("Core.String")) is None
        True
    """
    return _JULIA_TO_DTYPE.get(julia_type.qualified())


def is_jax_array(value: Any) -> bool:
    """Whether ``value`` is a ``jax.Array`` (tracers included), without importing jax: a jax array
    can only exist once jax is imported, so ``jax`` absent from ``sys.modules`` means no. The one
    test every layer uses (the writer, ``inspect``, the schema, the bridge).

    Example:
        >>> import numpy as np
        >>> is_jax_array(np.zeros(2))
        False
    """
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(value, jax.Array)


def kind_of(value: Any, *, path: Sequence[PathSegment] = ()) -> Kind:
    """The ``inspect`` node kind of a value-model value.

    Example:
        >>> kind_of(NamedTuple(w=np.zeros(2))), kind_of(()), kind_of(Symbol("relu")), kind_of(1.5)
        ('namedtuple', 'singleton', 'symbol', 'number')
    """
    if isinstance(value, NamedTuple):
        return "namedtuple"
    if isinstance(value, tuple):
        return "tuple" if value else "singleton"
    if isinstance(value, (list, JuliaArray)):
        return "vector"
    if isinstance(value, dict):
        return "dict"
    if isinstance(value, JuliaStruct) or (isinstance(value, Closure) and value.captures):
        return "struct"  # (a closure with captures: an instance of its struct type, in Julia)
    if isinstance(value, np.ndarray) or is_jax_array(value):
        return "array"
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, Symbol):
        return "symbol"
    if isinstance(value, str):
        return "string"
    if value is None or value is MISSING or value is UNDEF or isinstance(value, (Singleton, JuliaType)):
        return "singleton"  # a JuliaType held as a value is a DataType: no fields
    if isinstance(value, (int, float, complex, np.number, JuliaBits, BigFloat)):
        return "number"
    if isinstance(value, np.generic) and value.dtype in _DTYPE_TO_JULIA:
        return "number"  # a BFloat16 scalar (ml_dtypes scalars are not np.number)
    raise ConversionError(f"{type(value).__name__} is not a Julia value", path=path)


def julia_type_of(value: Any, *, path: Sequence[PathSegment] = ()) -> JuliaType:
    """The Julia type of a value-model value (canonical spelling).

    Raises :class:`treexchange.ConversionError` with the tree path for values with no Julia type.
    The writer takes its types from the same rules (:func:`type_of`), so what ``inspect`` and the
    schema say a value's type is, is the type ``save`` writes.

    Example:
        >>> str(julia_type_of(NamedTuple(weight=np.zeros((2, 3), np.float32), σ=())))
        'NamedTuple{(:weight, :σ), Tuple{Array{Float32, 2}, Tuple{}}}'
        >>> str(julia_type_of([1, "a"])), str(julia_type_of({"a": 1.0}))
        ('Array{Any, 1}', 'Dict{String, Float64}')
    """
    return type_of(value, _CANONICAL, tuple(path))


T = TypeVar("T")


class TypeBuilder(Protocol[T]):
    """How :func:`type_of` spells the types it decides on: :class:`JuliaType` for
    :func:`julia_type_of`, the writer's interned types (``_jld2._writer_types.TypeFactory``), which
    carry what only the writer needs (struct layouts, byte sizes, committed-type handles)."""

    def of(self, value: Any, path: TreePath) -> T:
        """The type of a value inside the one being typed (the builder may cache it)."""
        ...

    def for_type(self, t: JuliaType, path: TreePath) -> T:
        """A type named in full by ``t`` (numbers, ``String``, ``Nothing``, ``Type{T}``, ``Any``)."""
        ...

    def for_dtype(self, dtype: np.dtype, path: TreePath) -> T:
        """The Julia type of a numpy dtype's elements."""
        ...

    def for_namedtuple(self, names: list[str], fields: list[T]) -> T: ...

    def for_tuple(self, elems: list[T]) -> T: ...

    def for_list(self, value: list[Any], path: TreePath) -> T:
        """``Vector{Any}`` (a builder may check the elements)."""
        ...

    def for_array(self, eltype: T, ndims: int) -> T: ...

    def for_array_eltype(self, value: JuliaArray, path: TreePath) -> T: ...

    def for_dict(self, key: T, value: T) -> T: ...

    def for_declared_dict(
        self, declared: JuliaType, keys: set[T], values: set[T], path: TreePath
    ) -> T | None:
        """The Dict type a file stored for this Dict (``JuliaDict.julia_type``: ``IdDict``,
        ``ImmutableDict``, ``Dict{Any, Any}``), if the entries' types ``keys``/``values`` still fit
        it, else None (then the entries decide)."""
        ...

    def for_struct(self, value: JuliaStruct, path: TreePath) -> T: ...

    def for_bits(self, value: JuliaBits, path: TreePath) -> T: ...

    def for_singleton(self, value: Singleton, path: TreePath) -> T: ...


_DTYPE = attrgetter("dtype")
_NDIM = attrgetter("ndim")


def _types_of(values: Any, builder: TypeBuilder[T], path: TreePath) -> set[T]:
    """The distinct types of ``values`` (a collection): each value typed, but where they are all
    ``str`` or all numpy arrays only one of each kind the rules below tell apart (any ``str``;
    an array by its dtype and rank) -- a Dict of 100,000 arrays is typed in a few C passes."""
    kinds = set(map(type, values))
    if kinds == {str} or kinds == {np.ndarray}:
        if str in kinds:
            values = [next(iter(values))]
        else:
            values = dict(zip(zip(map(_DTYPE, values), map(_NDIM, values)), values)).values()
    return {builder.of(v, path) for v in values}


class _Exact(threading.local):
    on = False


_EXACT = _Exact()


@contextmanager
def _exact_paths() -> Iterator[None]:
    """Within the block, tuple elements and Dict values are typed with their paths made at once.

    Outside it they are first typed without (a path per element costs time in proportion to the
    depth), and only when one fails again with paths, for its message. Retrying at every level
    of a nest below the one that failed retried the levels below twice each: a tuple nest 200
    deep with a leaf that has no Julia type ran for 2**200 steps (a damaged file's convert).
    """
    before = _EXACT.on
    _EXACT.on = True
    try:
        yield
    finally:
        _EXACT.on = before


def type_of(value: Any, builder: TypeBuilder[T], path: TreePath = ()) -> T:
    """The Julia type of a value-model value, spelled by ``builder``: the one place that decides
    which Python value is which Julia type (:func:`julia_type_of` and the writer both call it).

    Example:
        >>> str(type_of((1, Symbol("a")), _CANONICAL))
        'Tuple{Int64, Symbol}'
    """
    if isinstance(value, NamedTuple):
        names = list(value)
        return builder.for_namedtuple(names, [builder.of(value[k], (*path, k)) for k in names])
    if isinstance(value, tuple):
        if not _EXACT.on:
            try:  # each element's path is made only for the message of an element that fails
                return builder.for_tuple([builder.of(v, path) for v in value])
            except Exception:
                pass
        with _exact_paths():  # (one retry for the whole nest below: see _exact_paths)
            return builder.for_tuple([builder.of(v, (*path, i)) for i, v in enumerate(value, 1)])
    if isinstance(value, list):
        return builder.for_list(value, path)
    if isinstance(value, JuliaArray):
        return builder.for_array(builder.for_array_eltype(value, path), len(value.shape))
    if isinstance(value, dict):
        # Dict{K,V}: K / V the one type of all keys / values, else Any (an empty Dict{String,Any}).
        keys = _types_of(value, builder, path)
        values = None
        if not _EXACT.on:
            try:  # each value's path is made only for the message of a value that fails
                values = _types_of(value.values(), builder, path)
            except Exception:
                pass
        if values is None:
            with _exact_paths():  # (one retry for the whole nest below: see _exact_paths)
                values = {builder.of(v, (*path, str(k))) for k, v in value.items()}
        declared = value.julia_type if isinstance(value, JuliaDict) else None
        if declared is not None:  # JLD2 writes a Dict under its own type, which entries do not tell
            kept = builder.for_declared_dict(declared, keys, values, path)
            if kept is not None:
                return kept
        k = keys.pop() if len(keys) == 1 else builder.for_type(STRING if not value else ANY, path)
        v = values.pop() if len(values) == 1 else builder.for_type(ANY, path)
        return builder.for_dict(k, v)
    if isinstance(value, JuliaStruct):
        return builder.for_struct(value, path)
    if isinstance(value, np.ndarray):
        return builder.for_array(builder.for_dtype(value.dtype, path), value.ndim)
    if is_jax_array(value):
        return builder.for_array(builder.for_dtype(jax_numpy_dtype(value, path), path), len(value.shape))
    if isinstance(value, np.generic):
        return builder.for_dtype(value.dtype, path)
    if isinstance(value, bool):
        return builder.for_type(BOOL, path)
    if isinstance(value, Symbol):
        return builder.for_type(SYMBOL, path)
    if isinstance(value, str):
        return builder.for_type(STRING, path)
    if value is None:
        return builder.for_type(NOTHING, path)
    if value is MISSING:
        return builder.for_type(MISSING_TYPE, path)
    if value is UNDEF:
        return builder.for_type(BOTTOM, path)
    if isinstance(value, JuliaType):
        return builder.for_type(DATATYPE, path)  # a type used as a value: Julia's typeof(Float64)
    if isinstance(value, Closure) and value.captures:
        struct = closure_struct(value)
        if struct is not None:  # (else its type alone: the writers refuse it, for_singleton)
            return builder.for_struct(struct, path)
    if isinstance(value, Singleton):
        return builder.for_singleton(value, path)
    if isinstance(value, JuliaBits):
        if not value.data:
            raise ConversionError("JuliaBits with no bytes", path=path)
        return builder.for_bits(value, path)
    if isinstance(value, Int128):
        if not -(2**127) <= value < 2**127:
            raise ConversionError(f"{int(value)} does not fit Int128", path=path)
        return builder.for_type(INT128, path)
    if isinstance(value, UInt128):
        if not 0 <= value < 2**128:
            raise ConversionError(f"{int(value)} does not fit UInt128", path=path)
        return builder.for_type(UINT128, path)
    if isinstance(value, BigInt):
        name = value.julia_name
        return builder.for_type(BIGINT if name == BIGINT.name else JuliaType(name), path)
    if isinstance(value, BigFloat):
        name = value.julia_name
        return builder.for_type(BIGFLOAT if name == BIGFLOAT.name else JuliaType(name), path)
    if isinstance(value, int):
        # The narrowest that holds it, as the bridge converts (_bridge._to_julia._python_int).
        if -(2**63) <= value < 2**63:
            return builder.for_type(INT64, path)
        if -(2**127) <= value < 2**127:
            return builder.for_type(INT128, path)
        return builder.for_type(UINT128 if 0 <= value < 2**128 else BIGINT, path)
    if isinstance(value, float):
        return builder.for_type(FLOAT64, path)
    if isinstance(value, complex):
        return builder.for_type(COMPLEX_F64, path)
    raise ConversionError(f"{type(value).__name__} has no Julia counterpart", path=path)


def jax_numpy_dtype(value: Any, path: Sequence[PathSegment] = ()) -> np.dtype:
    """The numpy dtype of a jax array; typed PRNG keys (``jax.random.key``) have none."""
    try:
        return np.dtype(value.dtype)
    except TypeError:
        raise ConversionError(
            f"jax arrays of dtype {value.dtype} have no Julia element type"
            + (" (a PRNG key: store jax.random.key_data(key) instead)" if "key<" in str(value.dtype) else ""),
            path=path,
        ) from None


class _Canonical:
    """The :class:`TypeBuilder` of :func:`julia_type_of`: :class:`JuliaType` in canonical spelling."""

    def of(self, value: Any, path: TreePath) -> JuliaType:
        return type_of(value, self, path)

    def for_type(self, t: JuliaType, path: TreePath) -> JuliaType:
        return t

    def for_dtype(self, dtype: np.dtype, path: TreePath) -> JuliaType:
        return julia_eltype(dtype, path=path)

    def for_namedtuple(self, names: list[str], fields: list[JuliaType]) -> JuliaType:
        return JuliaType(
            "Core.NamedTuple", (tuple(Symbol(n) for n in names), JuliaType("Core.Tuple", tuple(fields)))
        )

    def for_tuple(self, elems: list[JuliaType]) -> JuliaType:
        return JuliaType("Core.Tuple", tuple(elems))

    def for_list(self, value: list[Any], path: TreePath) -> JuliaType:
        for i, v in enumerate(value, 1):
            self.of(v, (*path, i))  # every element must be representable
        return VECTOR_ANY

    def for_array(self, eltype: JuliaType, ndims: int) -> JuliaType:
        return JuliaType("Core.Array", (eltype, np.int64(ndims)))

    def for_array_eltype(self, value: JuliaArray, path: TreePath) -> JuliaType:
        return qualified(value.eltype)

    def for_dict(self, key: JuliaType, value: JuliaType) -> JuliaType:
        return JuliaType("Base.Dict", (key, value))

    def for_declared_dict(
        self, declared: JuliaType, keys: set[JuliaType], values: set[JuliaType], path: TreePath
    ) -> JuliaType | None:
        declared = qualified(declared)
        if declared.name not in DICT_TYPES or len(declared.params) != 2:
            return None
        k, v = declared.params
        if isinstance(k, JuliaType) and isinstance(v, JuliaType) and _holds(k, keys) and _holds(v, values):
            return declared
        return None

    def for_struct(self, value: JuliaStruct, path: TreePath) -> JuliaType:
        return value.type

    def for_bits(self, value: JuliaBits, path: TreePath) -> JuliaType:
        return value.type

    def for_singleton(self, value: Singleton, path: TreePath) -> JuliaType:
        return value.type


_CANONICAL = _Canonical()


class SharedTypes(_Canonical):
    """:func:`julia_type_of` for many values of one tree, each container typed once: a cache by
    object identity, so a DAG of shared containers (BSON.jl backrefs: a tuple holding the same
    tuple twice, nested 60 times) is typed in time linear in its distinct objects, not in the
    size of the tree it unfolds to.

    Example:
        >>> t = (np.zeros(2),) * 2
        >>> types = SharedTypes()
        >>> str(types.of((t, t), ()))
        'Tuple{Tuple{Array{Float64, 1}, Array{Float64, 1}}, Tuple{Array{Float64, 1}, Array{Float64, 1}}}'
    """

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Any, JuliaType]] = {}

    def of(self, value: Any, path: TreePath) -> JuliaType:
        if not isinstance(value, (tuple, list, dict, NamedTuple, JuliaArray)):
            return type_of(value, self, path)
        hit = self._cache.get(id(value))
        if hit is not None and hit[0] is value:
            return hit[1]
        # A mutable container is Julia's by its own type, not its contents': so typed before them,
        # one holding itself (a cyclic Vector{Any}, a Dict holding itself) meets that type again.
        if isinstance(value, list):
            self._cache[id(value)] = (value, VECTOR_ANY)
        elif isinstance(value, JuliaDict) and value.julia_type is not None:
            self._cache[id(value)] = (value, qualified(value.julia_type))
        t = type_of(value, self, path)
        self._cache[id(value)] = (value, t)  # keeps the value alive: its id stays unique
        return t


DICT_TYPES = frozenset({"Base.Dict", "Base.IdDict", "Base.ImmutableDict"})
# Types whose values Julia stores inline or as the types themselves: a declared Dict parameter of
# one of these holds only entries of exactly that type. Any other named type (abstract, or a
# struct known by name) holds anything by reference, as the writer's ``Cat.OTHER``.
_CONCRETE_BUILTINS = frozenset(
    {"Core.String", "Core.Symbol", "Core.Nothing", "Base.Missing", "Core.Tuple", "Core.NamedTuple",
     "Core.Array", "Core.Pair", "Base.Complex", "Core.DataType", *DICT_TYPES}
)  # fmt: skip


def _holds(declared: JuliaType, found: set[JuliaType]) -> bool:
    """Whether a Dict declared with key (or value) type ``declared`` holds entries of the types ``found``."""
    if declared == ANY or declared.name == "Core.Union":
        return True
    if declared.name in _CONCRETE_BUILTINS or numpy_dtype(declared) is not None:
        return all(t == declared for t in found)
    return True  # a type known by name: entries are stored by reference


# Types Julia prints without their module (``str(JuliaType)``), for type text written by hand.
# Number types are not listed: ``qualified_name`` asks :func:`numpy_dtype` about ``Core.<name>``.
_SHORT_NAMES = {
    n.split(".", 1)[1]: n
    for n in (
        "Core.Int128",
        "Core.UInt128",
        "Core.String",
        "Core.Symbol",
        "Core.Any",
        "Core.DataType",
        "Core.Nothing",
        "Base.Missing",
        "Core.NamedTuple",
        "Core.Tuple",
        "Core.Union",
        "Core.Array",
        "Base.Complex",
        "Core.Pair",
        "Base.Dict",
    )
}


def qualified_name(name: str) -> str:
    """``name`` with its module, for the names Julia prints without one (``Float32``, ``String``).

    Example:
        >>> [qualified_name(n) for n in ("Float32", "Dict", "Main.Foo", "Foo")]
        ['Core.Float32', 'Base.Dict', 'Main.Foo', 'Foo']
    """
    if "." in name:
        return name
    found = _SHORT_NAMES.get(name)
    if found is not None:
        return found
    core = "Core." + name
    return core if core in _JULIA_TO_DTYPE else name


def qualified(t: JuliaType) -> JuliaType:
    """``t`` with :func:`qualified_name` applied to it and to its type parameters (``t`` itself when
    nothing changes): the spelling of a type written by hand (``JuliaArray("UInt128", ...)``) as
    files and :func:`julia_type_of` spell it.

    Example:
        >>> qualified(JuliaType.parse("Complex{Float32}")).qualified()
        'Base.Complex{Core.Float32}'
    """
    name = qualified_name(t.name)
    params = tuple(qualified(p) if isinstance(p, JuliaType) else p for p in t.params)
    if name == t.name and all(a is b for a, b in zip(params, t.params)):
        return t
    return JuliaType(name, params)


_WIDE_INT_DTYPES = {
    signed: np.dtype("V16", metadata={"julia": "int128" if signed else "uint128"}) for signed in (True, False)
}


def wide_int_dtype(signed: bool) -> np.dtype:
    """The 16-byte dtype of little-endian ``Int128`` / ``UInt128`` arrays, labelled by its metadata.

    numpy has no 128-bit integers: arrays of them are shown as raw 16-byte elements whose
    ``dtype.metadata["julia"]`` names the type (``presented_dtype_name`` reads it).

    Example:
        >>> wide_int_dtype(False).itemsize, wide_int_dtype(False).metadata["julia"]
        (16, 'uint128')
    """
    return _WIDE_INT_DTYPES[signed]


def presented_dtype_name(dtype: np.dtype) -> str:
    """``dtype.name``, or ``int128`` / ``uint128`` for :func:`wide_int_dtype` dtypes.

    Example:
        >>> presented_dtype_name(wide_int_dtype(True)), presented_dtype_name(np.dtype("<f4"))
        ('int128', 'float32')
    """
    meta = dtype.metadata
    if meta is not None and "julia" in meta:
        return str(meta["julia"])
    return dtype.name


def wide_int_array(value: Any) -> np.ndarray | None:
    """A ``JuliaArray`` of ``Int128`` / ``UInt128`` as an array of :func:`wide_int_dtype` (the
    little-endian bytes JLD2 stores, Julia's shape); ``None`` for any other value.

    Example:
        >>> from treexchange import JuliaArray, UInt128
        >>> a = wide_int_array(JuliaArray("UInt128", [UInt128(1), UInt128(2**100)]))
        >>> a.shape, presented_dtype_name(a.dtype), a.tobytes()[:3].hex()
        ((2,), 'uint128', '010000')
    """
    if not isinstance(value, JuliaArray) or value.eltype.params:
        return None
    eltype = value.eltype  # "UInt128" as users spell it, or "Core.UInt128" as files do
    if not eltype.is_named("Int128", "UInt128") or eltype.name.split(".")[0] not in ("Core", eltype.name):
        return None
    signed = eltype.is_named("Int128")
    try:
        raw = b"".join(int(x).to_bytes(16, "little", signed=signed) for x in value)
    except (OverflowError, TypeError, ValueError):
        return None  # not every element is an integer of that width: not a plain array
    dtype = wide_int_dtype(signed)
    return np.frombuffer(raw, dtype, len(value)).reshape(value.shape, order="F")
