"""Fields of struct types without declared field types whose instances hold values of several types.

A struct read from a BSON file, or made in Python, carries no declaration of its fields' types
(BSON.jl stores a struct's type and field values only). The writer declares each field with the
type its values have, which is Julia's declaration whenever every instance agrees. Where the
instances disagree -- ``active`` ``false`` in one ``Flux.BatchNorm`` and ``nothing`` in another
(Flux 0.11-0.14 declare ``active::Union{Bool, Nothing}``), a user's ``struct Block; chain; end``
holding Chains of different types -- Julia must have declared the field with a type that is not
concrete, and JLD2.jl stores any such field by reference, each value a dataset of its own type.
The writer does the same (:meth:`TypeFactory.declare_abstract`); it used to keep the first
instance's type and refuse the others, so such a BSON model did not convert to JLD2 whole.

Found before anything is typed (the first instance typed fixes a type's fields), in one pass that
compares each instance's fields with the first instance's cheaply (the same object, a numpy
array's dtype and rank, a struct's type object, a number's class) and types both values
(:func:`julia_type_of`) only where that does not settle it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import TreePath, TreexchangeError
from .._typeof import julia_type_of
from .._values import UNDEF, JuliaStruct, Singleton, Symbol
from ._writer_types import TypeFactory

# Python classes whose values are all of one Julia type (an int wider than Int64 is written as
# Int128 or BigInt, where another is Int64: then the encoder's check still refuses it)
_PLAIN = frozenset({bool, int, float, str, Symbol, type(None)})
_NUMPY_SCALARS = (np.number, np.bool_)  # (one class, one dtype: np.float32(1) is a Float32)


def declare_abstract_fields(structs: Sequence[tuple[JuliaStruct, TreePath]], types: TypeFactory) -> None:
    """Declare to ``types`` the fields of the struct types among ``structs`` (each with its path)
    that have no declared field types and hold values of several Julia types.

    Example:
        >>> from treexchange import JuliaStruct
        >>> from treexchange._jld2._writer_types import TypeFactory
        >>> types = TypeFactory()
        >>> on, unset = JuliaStruct("Main.L", {"active": False}), JuliaStruct("Main.L", {"active": None})
        >>> declare_abstract_fields([(on, ("a",)), (unset, ("b",))], types)
        >>> types.of_value(unset, ("b",)).fields
        (('active', JT(Core.Any)),)
    """
    # a struct's type object (kept alive: ids stay unique), or the name of one without parameters,
    # -> its key (the writer's); per key its first instance. (By identity: a file's structs share
    # their type objects; hashing, comparing or spelling a JuliaType per struct cost more than
    # the rest of the pass.)
    keys: dict[int | str, tuple[Any, str]] = {}
    first: dict[str, tuple[JuliaStruct, TreePath]] = {}
    typed: dict[tuple[str, str], str | None] = {}  # the first instance's value's type, by field
    several: set[tuple[str, str]] = set()
    for value, path in structs:
        if value.layout is not None:
            continue  # (read from JLD2: its fields' types are declared)
        t = value.type
        known = keys.get(t.name if not t.params else id(t))  # (one text per name: structs made in Python)
        if known is None:
            known = keys[t.name if not t.params else id(t)] = (t, t.qualified())
        key = known[1]
        seen = first.get(key)
        if seen is None:
            first[key] = (value, path)
            continue
        model = seen[0].fields
        if len(model) != len(value.fields):
            continue  # (other fields: refused when the value is typed)
        for (name, v), f in zip(value.fields.items(), model.values()):
            kind = type(v)
            if v is f or (kind is type(f) and kind in _PLAIN) or v is UNDEF or f is UNDEF or _same_type(v, f):
                continue
            at = (key, name)
            if at in several:
                continue
            if at not in typed:
                typed[at] = _type_key(f, (*seen[1], name))
            if _type_key(v, (*path, name)) != typed[at]:
                several.add(at)
    for key, name in several:
        types.declare_abstract(key, name)


def _same_type(v: Any, f: Any) -> bool:
    """Whether ``v`` is surely of the Julia type of ``f``, told cheaply (False: type both to know)."""
    kind = type(v)
    if kind is not type(f):
        return False
    if kind is np.ndarray:
        return v.ndim == f.ndim and (v.dtype is f.dtype or v.dtype == f.dtype)
    if kind is JuliaStruct or kind is Singleton:
        return v.type is f.type or v.type == f.type
    return kind in _PLAIN or issubclass(kind, _NUMPY_SCALARS)


def _type_key(v: Any, path: TreePath) -> str | None:
    """The Julia type of ``v`` as text; None when it has none (reported when it is written)."""
    try:
        if type(v) is JuliaStruct:
            return v.type.qualified()
        return julia_type_of(v, path=path).qualified()
    except TreexchangeError:
        return None
