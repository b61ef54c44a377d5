"""Arrays of bits structs in BSON.jl files: each element's fields decoded from the raw bytes.

BSON.jl stores an array whose element type is a bits type (Julia's ``isbitstype``) as the raw
memory of its elements (``reinterpret(UInt8, x)``; BSON.jl's ``src/extensions.jl``, read to learn
the format), whatever that type is: a number, and just as well a struct of numbers
(``Complex{Int64}``, ``Rational{Int32}``, ``Tuple{Int64, Float64}``, a NamedTuple, a ``Pair``).
Those bytes are the fields one after the other, each at a multiple of its own alignment, as C lays
a struct out (numpy's ``align=True`` layout).

The file keeps no field types, so a struct is decoded only when its type alone gives them: the
Core and Base types above, nested in one another as deep as their parameters say. Each element
then reads as the same value a single one of them reads as (a ``JuliaStruct`` with fields ``re``,
``im``; a ``tuple``; a :class:`NamedTuple`), as the JLD2 reader reads them too. A struct of one's
own (``Main.Point``), whose fields the file does not name, stays its raw bytes
(:class:`JuliaBits`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._juliatype import JuliaType
from .._typeof import numpy_dtype
from .._values import JuliaStruct, NamedTuple

# Struct types whose every field has the type's one parameter
_SAME_TYPED_FIELDS = {"Base.Complex": ("re", "im"), "Base.Rational": ("num", "den")}
_MAX_NESTING = 16  # deeper parameter nesting is no bits struct anyone writes: left as raw bytes


def _field_types(t: JuliaType) -> list[tuple[str, Any]] | None:
    """The (name, type) of each field of ``t`` when its type alone says them, else ``None``."""
    names = _SAME_TYPED_FIELDS.get(t.name)
    if names is not None and len(t.params) == 1:
        return [(n, t.params[0]) for n in names]
    if t.name == "Base.Pair" and len(t.params) == 2:
        return [("first", t.params[0]), ("second", t.params[1])]
    if t.name == "Core.Tuple":
        return [(str(i), p) for i, p in enumerate(t.params, 1)]
    if t.name == "Core.NamedTuple" and len(t.params) == 2:
        keys, types = t.params
        if isinstance(keys, tuple) and isinstance(types, JuliaType) and types.name == "Core.Tuple":
            if len(keys) == len(types.params):
                return [(str(k), p) for k, p in zip(keys, types.params)]
    return None


def bits_struct_dtype(t: JuliaType, depth: int = 0) -> np.dtype | None:
    """The numpy dtype an element of bits type ``t`` is stored as (a structured dtype, C layout,
    for a struct), or ``None`` when its layout is not known from the type.

    Example:
        >>> from treexchange._juliatype import JuliaType
        >>> bits_struct_dtype(JuliaType.parse("Base.Complex{Core.Int64}")).itemsize
        16
        >>> bits_struct_dtype(JuliaType.parse("Core.Tuple{Core.Int8, Core.Float64}")).itemsize
        16
        >>> bits_struct_dtype(JuliaType.parse("Main.Point")) is None
        True
    """
    number = numpy_dtype(t)
    if number is not None:
        return number.newbyteorder("<")
    fields = _field_types(t)
    if not fields or depth >= _MAX_NESTING:
        return None
    parts = []
    for name, ft in fields:
        sub = bits_struct_dtype(ft, depth + 1) if isinstance(ft, JuliaType) else None
        if sub is None:
            return None
        parts.append((name, sub))
    return np.dtype(parts, align=True)


def bits_struct_value(t: JuliaType, item: Any) -> Any:
    """The value of one element (a numpy record of ``bits_struct_dtype(t)``), as a single value
    of that type reads: a number as its numpy scalar (``Bool`` as ``bool``), a ``Tuple`` as a
    ``tuple``, a NamedTuple as :class:`NamedTuple`, any other struct as a :class:`JuliaStruct`."""
    if numpy_dtype(t) is not None:
        return bool(item) if isinstance(item, np.bool_) else item
    fields = _field_types(t) or []
    values = [bits_struct_value(ft, item[name]) for name, ft in fields]
    if t.name == "Core.Tuple":
        return tuple(values)
    if t.name == "Core.NamedTuple":
        return NamedTuple(zip((n for n, _ in fields), values))
    return JuliaStruct(t, zip((n for n, _ in fields), values))
