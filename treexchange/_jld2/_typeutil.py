"""Small helpers about Julia types as JLD2 stores them: tuple spellings, ghost values, basic types.

JLD2 spells tuple types three ways (``Core.Tuple{A,B}``, ``Tuple{A,B}`` / bare ``Tuple`` for
``Tuple{}``, and ``NTuple{N,T}``); everything here accepts all of them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import FormatError, LimitError, UnsupportedError
from .._hdf5._model import H5Class, H5Type
from .._juliatype import JuliaType
from .._limits import Limits
from .._typeof import ANY as ANY, NOTHING as NOTHING
from .._values import MISSING, NamedTuple, Singleton

TUPLE_NAMES = frozenset({"Tuple", "Core.Tuple", "NTuple", "Core.NTuple", "Base.NTuple"})
NAMEDTUPLE_NAMES = frozenset({"Core.NamedTuple", "NamedTuple", "Base.NamedTuple"})


def is_tuple_type(t: Any) -> bool:
    """Whether ``t`` is a Julia tuple type in any of JLD2's spellings.

    Example:
        >>> is_tuple_type(JuliaType.parse("NTuple{2,Core.Int64}")), is_tuple_type(JuliaType("Tuple"))
        (True, True)
    """
    return isinstance(t, JuliaType) and t.name in TUPLE_NAMES


def is_namedtuple_type(t: Any) -> bool:
    """Whether ``t`` is ``Core.NamedTuple{...}`` (with or without parameters)."""
    return isinstance(t, JuliaType) and t.name in NAMEDTUPLE_NAMES


def tuple_element_types(t: JuliaType, limits: Limits) -> list[Any]:
    """The element types of a tuple type: ``NTuple{3,T}`` gives ``[T, T, T]``.

    Raises:
        FormatError: an ``NTuple`` whose parameters are not ``(N::Integer, T)``.
        LimitError: ``N`` beyond ``limits.max_elements``.

    Example:
        >>> [str(x) for x in tuple_element_types(JuliaType.parse("NTuple{2,Core.Int64}"), Limits())]
        ['Int64', 'Int64']
    """
    if t.basename == "NTuple":
        if len(t.params) != 2 or not isinstance(t.params[0], (int, np.integer)):
            raise FormatError(f"malformed NTuple type {t.qualified()}")
        n = int(t.params[0])
        if n < 0:
            raise FormatError(f"negative NTuple length in {t.qualified()}")
        if n > limits.max_elements:
            raise LimitError(f"NTuple length {n} exceeds max_elements={limits.max_elements}")
        return [t.params[1]] * n
    return list(t.params)


def namedtuple_names_types(t: JuliaType, limits: Limits) -> tuple[list[str], list[Any]] | None:
    """Field names and types of ``NamedTuple{names, Tuple{...}}``, or ``None`` if unparametrized.

    Example:
        >>> from treexchange import Symbol
        >>> tt = JuliaType("Tuple", (JuliaType("Core.Int64"),))
        >>> nt = JuliaType("Core.NamedTuple", ((Symbol("a"),), tt))
        >>> namedtuple_names_types(nt, Limits())[0]
        ['a']
    """
    if len(t.params) != 2:
        return None
    names, types = t.params
    if not isinstance(names, tuple) or not all(isinstance(n, str) for n in names):
        return None
    if not is_tuple_type(types):
        return None
    elems = tuple_element_types(types, limits)
    if len(elems) != len(names):
        return None
    out = [str(n) for n in names]
    if len(set(out)) != len(out):
        raise FormatError(f"NamedTuple type {t} names a field twice")
    return out, elems


def ghost_value(t: Any, limits: Limits, depth: int = 0) -> Any:
    """The only value of a zero-size (ghost) Julia type.

    ``Tuple{}`` is ``()``, ``Nothing`` is ``None``, ``Missing`` is :data:`MISSING`, tuples and
    NamedTuples of ghosts are built element by element, anything else (functions, RNG
    singletons, empty structs) is a :class:`Singleton` of the type.

    Example:
        >>> ghost_value(JuliaType("Tuple"), Limits()), ghost_value(JuliaType("Core.Nothing"), Limits())
        ((), None)
        >>> ghost_value(JuliaType("NNlib.#relu"), Limits())
        Singleton('NNlib.#relu')
    """
    if depth > limits.max_depth:
        raise LimitError(f"ghost type nested deeper than max_depth={limits.max_depth}")
    if not isinstance(t, JuliaType):
        raise FormatError(f"ghost field of non-type {t!r}")
    if t.name == "Core.Nothing":
        return None
    if t.name == "Base.Missing":
        return MISSING
    if is_tuple_type(t):
        return tuple(ghost_value(e, limits, depth + 1) for e in tuple_element_types(t, limits))
    if is_namedtuple_type(t):
        parsed = namedtuple_names_types(t, limits)
        if parsed is not None:
            names, types = parsed
            return NamedTuple((n, ghost_value(e, limits, depth + 1)) for n, e in zip(names, types))
        if not t.params:
            return NamedTuple()
    return Singleton(t)


_INT_NAMES = {1: "Int8", 2: "Int16", 4: "Int32", 8: "Int64", 16: "Int128"}
_FLOAT_NAMES = {2: "Core.Float16", 4: "Core.Float32", 8: "Core.Float64"}


def basic_julia_type(h5: H5Type) -> JuliaType:
    """The Julia type JLD2 reads an uncommitted HDF5 datatype as.

    Example:
        >>> from treexchange._hdf5._model import H5Class, H5Type
        >>> str(basic_julia_type(H5Type(H5Class.FIXED, 1, 0x08, 8)))
        'Int64'
    """
    cls = h5.cls
    if cls == H5Class.FIXED or cls == H5Class.ENUM:
        name = _INT_NAMES.get(h5.size)
        if cls == H5Class.ENUM:
            # JLD2 reads enums as the unsigned integer of their size (h5py's bool is an enum).
            if name is None:
                raise UnsupportedError(f"HDF5 enumeration of {h5.size} bytes (no Julia integer type)")
            return JuliaType("Core.U" + name)
        if name is None:
            return JuliaType("JLD2.OpaqueData", (np.int64(h5.size),))
        return JuliaType("Core." + (name if h5.signed else "U" + name))
    if cls == H5Class.FLOAT:
        float_name = _FLOAT_NAMES.get(h5.size)
        if float_name is None:
            raise UnsupportedError(f"HDF5 floating-point type of {h5.size} bytes (no Julia float type)")
        return JuliaType(float_name)
    if cls == H5Class.BITFIELD:
        return JuliaType("Core.Bool")
    if cls == H5Class.STRING or (cls == H5Class.VLEN and h5.is_vlen_string):
        return JuliaType("Core.String")
    if cls == H5Class.REFERENCE:
        return ANY
    if cls == H5Class.OPAQUE:
        return JuliaType("JLD2.OpaqueData", (np.int64(h5.size),))
    return ANY


def array_type(eltype: Any, ndims: int, *, memory: bool = False) -> JuliaType:
    """``Array{T,N}`` (or ``Memory{T}``) as JLD2 names it.

    Example:
        >>> str(array_type(JuliaType("Core.Float32"), 2))
        'Array{Float32, 2}'
    """
    if isinstance(eltype, JuliaType) and eltype.name == "Core.UnionAll" and len(eltype.params) == 1:
        # A where type (_juliatype.where_type) is, as a type parameter, the UnionAll value
        # itself, the form DataType values in the file give it.
        eltype = eltype.params[0]
    if memory:
        # Julia prints GenericMemory{:not_atomic, T, AddrSpace(0)} as its alias Memory{T}.
        return JuliaType("Core.Memory", (eltype,))
    return JuliaType("Core.Array", (eltype, np.int64(ndims)))
