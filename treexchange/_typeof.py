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
from collections.abc import Sequence
from typing import Any, Literal

import ml_dtypes
import numpy as np

from ._errors import ConversionError, PathSegment
from ._juliatype import JuliaType
from ._values import (
    MISSING,
    UNDEF,
    Int128,
    JuliaArray,
    JuliaBits,
    JuliaStruct,
    NamedTuple,
    Singleton,
    Symbol,
    UInt128,
)

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
INT64 = JuliaType("Core.Int64")
FLOAT64 = JuliaType("Core.Float64")
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
    np.dtype(np.complex128): JuliaType("Base.Complex", (FLOAT64,)),
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
    if isinstance(value, JuliaStruct):
        return "struct"
    if isinstance(value, np.ndarray) or is_jax_array(value):
        return "array"
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, Symbol):
        return "symbol"
    if isinstance(value, str):
        return "string"
    if value is None or value is MISSING or value is UNDEF or isinstance(value, Singleton):
        return "singleton"
    if isinstance(value, (int, float, complex, np.number, JuliaBits)):
        return "number"
    raise ConversionError(f"{type(value).__name__} is not a Julia value", path=path)


def julia_type_of(value: Any, *, path: Sequence[PathSegment] = ()) -> JuliaType:
    """The Julia type of a value-model value (canonical spelling).

    Raises :class:`treexchange.ConversionError` with the tree path for values with no Julia type.

    Example:
        >>> str(julia_type_of(NamedTuple(weight=np.zeros((2, 3), np.float32), σ=())))
        'NamedTuple{(:weight, :σ), Tuple{Array{Float32, 2}, Tuple{}}}'
        >>> str(julia_type_of([1, "a"])), str(julia_type_of({"a": 1.0}))
        ('Array{Any, 1}', 'Dict{String, Float64}')
    """
    path = tuple(path)
    if isinstance(value, NamedTuple):
        names = tuple(Symbol(k) for k in value)
        fields = tuple(julia_type_of(v, path=(*path, k)) for k, v in value.items())
        return JuliaType("Core.NamedTuple", (names, JuliaType("Core.Tuple", fields)))
    if isinstance(value, tuple):
        return JuliaType(
            "Core.Tuple", tuple(julia_type_of(v, path=(*path, i)) for i, v in enumerate(value, 1))
        )
    if isinstance(value, list):
        for i, v in enumerate(value, 1):
            julia_type_of(v, path=(*path, i))  # every element must be representable
        return JuliaType("Core.Array", (ANY, np.int64(1)))
    if isinstance(value, JuliaArray):
        return JuliaType("Core.Array", (value.eltype, np.int64(len(value.shape))))
    if isinstance(value, dict):
        return JuliaType("Base.Dict", _dict_params(value, path))
    if isinstance(value, JuliaStruct):
        return value.type
    if isinstance(value, np.ndarray) or is_jax_array(value):
        dtype = np.dtype(value.dtype)
        return JuliaType("Core.Array", (julia_eltype(dtype, path=path), np.int64(len(value.shape))))
    if isinstance(value, (bool, np.bool_)):
        return BOOL
    if isinstance(value, Symbol):
        return SYMBOL
    if isinstance(value, str):
        return STRING
    if value is None:
        return NOTHING
    if value is MISSING:
        return MISSING_TYPE
    if value is UNDEF:
        return BOTTOM
    if isinstance(value, (Singleton, JuliaBits)):
        return value.type
    if isinstance(value, Int128):
        return JuliaType(Int128.julia_name)
    if isinstance(value, UInt128):
        return JuliaType(UInt128.julia_name)
    if isinstance(value, np.generic):
        return julia_eltype(value.dtype, path=path)
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ConversionError(
                f"Python int {value} does not fit Int64 (use treexchange.Int128 or a numpy type)",
                path=path,
            )
        return INT64
    if isinstance(value, float):
        return FLOAT64
    if isinstance(value, complex):
        return JuliaType("Base.Complex", (FLOAT64,))
    raise ConversionError(f"{type(value).__name__} has no Julia counterpart", path=path)


def _dict_params(value: dict[Any, Any], path: tuple[PathSegment, ...]) -> tuple[JuliaType, JuliaType]:
    key_types = {julia_type_of(k, path=path) for k in value}
    value_types = {julia_type_of(v, path=(*path, str(k))) for k, v in value.items()}
    key_type = key_types.pop() if len(key_types) == 1 else (STRING if not value else ANY)
    value_type = value_types.pop() if len(value_types) == 1 else ANY
    return key_type, value_type


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
