"""The Julia types the writer reasons with: just enough of Julia's type system to mirror JLD2.jl.

JLD2.jl decides everything about a value's encoding from its Julia ``DataType``: whether it is a
ghost (``hasdata``), bits (``isbitstype``), mutable, how large it is in memory (``sizeof``, for
the 1024-byte inline rule), its fields, and whether it is custom-serialized (``writeas``:
``Dict`` -> ``JLD2.SerializedDict``, ``NTuple{N,T}`` with N > 10 -> ``Vector{T}``). A :class:`JT`
carries those facts for one concrete type; a :class:`TypeFactory` builds and interns them, from
value-model values (:meth:`TypeFactory.of_value`) or from :class:`~treexchange.JuliaType` text
read from a file (:meth:`TypeFactory.of_type`, used for type parameters).

Which Julia type a value has is not decided here: :meth:`TypeFactory.of_value` runs the one rule
set, :func:`treexchange._typeof.type_of` (also behind ``julia_type_of``, so ``inspect`` and the
schema name the type ``save`` writes), with the factory as its ``TypeBuilder``. What the writer
adds is storage: struct layouts, byte sizes of bits types, a ``Type{T}`` value stored as a
``DataType``, and the refusal of ``#undef`` where JLD2 keeps no reference.

Decisions (see docs/writing.md):

* A :class:`~treexchange.JuliaStruct` is *immutable* unless flagged ``mutable=True`` (the file
  does not say; the reader flags what the file shows, see docs/writing.md), with the field
  storage recorded in its ``layout`` when it has one, else with concrete field types inferred
  from the field values (like a NamedTuple). Mutability is a property of the type: one flagged
  instance makes its type mutable.
* ``dict`` becomes ``Dict{K,V}`` with K / V the common Julia type of the keys / values, else
  ``Any`` (the rule of :func:`treexchange._typeof.type_of`).
* BFloat16 is ``Core.BFloat16`` (what Julia >= 1.11 with BFloat16s.jl writes).

Which numpy dtype is which Julia number type is decided in one place, :mod:`treexchange._typeof`
(``julia_eltype`` / ``numpy_dtype``); this module adds only what JLD2 needs on top: the HDF5 type
each native number is stored as.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import ConversionError, PathSegment, TreePath, TreexchangeError, UnsupportedError
from .._hdf5._model import H5Class, H5Type
from .._juliatype import JuliaType, _render_param, is_bigfloat_name, is_bigint_name, where_type
from .._typeof import closure_as_struct, julia_eltype, numpy_dtype, qualified_name, type_of
from .._values import (
    MISSING,
    UNDEF,
    BigFloat,
    Closure,
    JuliaArray,
    JuliaBits,
    JuliaStruct,
    NamedTuple as JlNamedTuple,
    Singleton,
    Symbol,
)
from ._base62 import int_to_base62
from ._encode_hdf5 import VLEN_UTF8, bitfield_type, fixed_type, float_type
from ._layout import StructLayout

if TYPE_CHECKING:  # (annotations only)
    from ._layout import FieldLayout, StructLayout

MAX_INLINE_SIZE = 1024
"""JLD2's ``MAX_INLINE_SIZE``: immutable fields larger than this (Julia ``sizeof``) become references."""

NTUPLE_INLINE_THRESHOLD = 10
"""Homogeneous tuples with more elements than this are written as ``Vector{T}`` (custom serialization)."""


class Cat(enum.Enum):
    """What kind of Julia DataType a :class:`JT` is."""

    PRIM = "prim"  # Int8..UInt128, Float16/32/64, Bool: native HDF5 number types
    BITS = "bits"  # other primitive bits types (BFloat16, Char, enums): committed opaque types
    STRUCT = "struct"  # Tuple, NamedTuple, Complex, Pair, other structs (ghosts included)
    STRING = "string"
    SYMBOL = "symbol"
    ARRAY = "array"
    ANY = "any"  # Core.Any (abstract)
    DICT = "dict"  # Dict{K,V}, written as JLD2.SerializedDict
    DATATYPE = "datatype"  # Core.DataType (the bootstrap type)
    UNION = "union"  # Union{A,B,...} (abstract; stored as a Core.Union dataset where needed)
    OTHER = "other"  # a type known only by name (a type parameter we have no value for)


class JT:
    """One concrete Julia type with the properties JLD2's writer looks at.

    Attributes:
        cat: the :class:`Cat`.
        name: module-qualified type name (``"Core.NamedTuple"``); tuples are ``"Core.Tuple"``.
        params: the type parameters: other :class:`JT` or plain values (``np.int64(2)``, a tuple
            of :class:`~treexchange.Symbol` for NamedTuple names, ``True`` ...).
        fields: ``(name, declared JT)`` per field (structs only).
        is_tuple: whether this is a ``Tuple`` type (fields named ``"1"``, ``"2"``...).
        mutable: Julia ``ismutabletype``.
        nbytes: byte size of PRIM/BITS values.
        h5: the native HDF5 type of a PRIM.
        dtype: the numpy dtype of a PRIM (``None`` for Int128/UInt128, which numpy lacks).
        eltype, ndims: element type and rank of an ARRAY.
        key: canonical text identifying the type (JLD2's ``jlh5type`` dictionary key).
    """

    __slots__ = (
        "_align",
        "_hasdata",
        "_isbits",
        "_kind_init",
        "_kind_uninit",
        "_size",
        "_writeas",
        "cat",
        "dtype",
        "eltype",
        "fields",
        "h5",
        "is_tuple",
        "key",
        "layout",
        "mutable",
        "name",
        "nbytes",
        "ndims",
        "params",
        "raw_params",
    )

    def __init__(
        self,
        cat: Cat,
        name: str,
        params: tuple[Any, ...] = (),
        *,
        fields: tuple[tuple[str, JT], ...] = (),
        is_tuple: bool = False,
        mutable: bool = False,
        nbytes: int = 0,
        h5: H5Type | None = None,
        dtype: np.dtype | None = None,
        eltype: JT | None = None,
        ndims: int = 0,
        key: str | None = None,
        raw_params: tuple[Any, ...] | None = None,
        layout: Any = None,
    ) -> None:
        self.cat = cat
        self.name = name
        self.params = params
        self.raw_params = raw_params
        self.fields = fields
        self.is_tuple = is_tuple
        self.mutable = mutable
        self.nbytes = nbytes
        self.h5 = h5
        self.dtype = dtype
        self.eltype = eltype
        self.ndims = ndims
        self.layout = layout
        self.key = key if key is not None else type_key(name, params)
        self._writeas: JT | None = None
        self._hasdata: bool | None = None
        self._isbits: bool | None = None
        self._size: int | None = None
        self._align: int = 1
        # How a field (initialized) / array element (not) of this type is stored, decided once by
        # the writer (JLD2Writer.field_kind) and never changed: every later header, committed
        # compound and encoded value of this type follows the first decision.
        self._kind_init: str | None = None
        self._kind_uninit: str | None = None

    def __repr__(self) -> str:
        return f"JT({self.key})"

    # --- custom serialization ---------------------------------------------------------------
    @property
    def writeas(self) -> JT:
        """JLD2's ``writeas(T)``: the type actually stored (``self`` unless custom-serialized)."""
        return self._writeas if self._writeas is not None else self

    # --- Julia type predicates ------------------------------------------------------------------
    @property
    def concrete(self) -> bool:
        return self.cat is not Cat.ANY and self.cat is not Cat.UNION

    @property
    def hasdata(self) -> bool:
        """JLD2's ``hasdata``: whether values of this type carry any bytes."""
        if self._hasdata is None:
            if self.cat in (Cat.PRIM, Cat.BITS):
                self._hasdata = True
            elif self.cat is Cat.STRUCT:
                self._hasdata = any(ft.writeas.hasfielddata for _, ft in self.fields)
            else:
                # String, Symbol, arrays, dicts, DataType are mutable; ANY/OTHER are unknown.
                self._hasdata = True
        return self._hasdata

    @property
    def hasfielddata(self) -> bool:
        """JLD2's ``hasfielddata``: false exactly for ghost types (no stored field at all)."""
        # Abstract, mutable and special (String, Symbol, Array, DataType) types always have data;
        # numbers and other primitive bits types too.
        if self.cat is not Cat.STRUCT or self.mutable:
            return True
        return self.hasdata

    @property
    def ghost(self) -> bool:
        return not self.hasfielddata

    @property
    def isbits(self) -> bool:
        """Julia ``isbitstype``: immutable and free of pointers."""
        if self._isbits is None:
            if self.cat in (Cat.PRIM, Cat.BITS):
                self._isbits = True
            elif self.cat is Cat.STRUCT and not self.mutable:
                self._isbits = all(ft.isbits for _, ft in self.fields)
            else:
                self._isbits = False
        return self._isbits

    @property
    def sizeof(self) -> int:
        """Julia ``sizeof`` of the type (in-memory, with alignment padding)."""
        self._layout_size()
        return self._size if self._size is not None else 8

    def inline_size_align(self) -> tuple[int, int]:
        """Size and alignment this type takes *as a field* in Julia memory."""
        if self.cat in (Cat.PRIM, Cat.BITS):
            return self.nbytes, _prim_align(self.nbytes)
        if self.cat is Cat.STRUCT and not self.mutable:
            self._layout_size()
            return (self._size if self._size is not None else 8), self._align
        return 8, 8  # a pointer

    def _layout_size(self) -> None:
        if self._size is not None:
            return
        if self.cat in (Cat.PRIM, Cat.BITS):
            self._size, self._align = self.nbytes, _prim_align(self.nbytes)
            return
        if self.cat is not Cat.STRUCT:
            self._size, self._align = 8, 8
            return
        offset = 0
        align = 1
        for _, ft in self.fields:
            fsize, falign = ft.inline_size_align()
            offset = -(-offset // falign) * falign
            offset += fsize
            align = max(align, falign)
        self._size = -(-offset // align) * align
        self._align = align


def _prim_align(nbytes: int) -> int:
    align = 1
    while align * 2 <= min(nbytes, 16):
        align *= 2
    return align


# --- canonical keys ------------------------------------------------------------------------------


def param_key(p: Any) -> str:
    """Canonical text of one type parameter: a :class:`JT` by its key, anything else exactly as
    :meth:`JuliaType.qualified` prints it, so a type built here and the same type read from a
    file (``JuliaType`` text) get the same key."""
    if isinstance(p, JT):
        return p.key
    return _render_param(p, short=False, sep=",")


def type_key(name: str, params: tuple[Any, ...]) -> str:
    if not params:
        return name
    return name + "{" + ",".join(param_key(p) for p in params) + "}"


def shown_type(t: JT) -> str:
    """A type as an error message names it: ``Core.Tuple{}`` for the empty tuple type, whose key
    (``Core.Tuple``, as JLD2 names it) reads like the abstract ``Tuple``."""
    return t.key + "{}" if t.is_tuple and not t.params else t.key


# --- the factory -----------------------------------------------------------------------------------

_TUPLE_NAMES = ("Core.Tuple", "Tuple")


def _abstract(t: JT) -> bool:
    """Whether Julia's ``isconcretetype`` is false for a type parameter the writer can tell:
    ``Any``, a ``Union``, a tuple type with such an element (``Tuple{Any,Any}``). A struct
    known by name only may be abstract (``Real``) or not: not told."""
    if t.cat is Cat.ANY or t.cat is Cat.UNION:
        return True
    return t.cat is Cat.OTHER and t.is_tuple and all(isinstance(p, JT) for p in t.params)


_UNION_NAMES = ("Core.Union", "Union")
# The Dicts JLD2 writes as a JLD2.SerializedDict of their pairs (src/data/specialcased_types.jl).
SERIALIZED_DICTS = frozenset({"Base.Dict", "Base.IdDict", "Base.ImmutableDict"})
# Struct types Julia declares mutable, whatever a file shows of them (a TypeVar read once is
# not flagged by the reader, yet JLD2 writes it as a shared, referenced dataset).
_MUTABLE_BUILTINS = frozenset({"Core.TypeVar"})
# Core types whose fields Julia declares ``Any`` (JLD2 stores each as a reference): a value that
# brought no layout (read from BSON) would otherwise have them typed by its first instance, and a
# ``TypeVar`` bounded by a ``Union`` or ``where`` type conflict with one bounded by a DataType.
_ANY_FIELDS: dict[str, frozenset[str]] = {
    "Core.TypeVar": frozenset({"lb", "ub"}),
    "Core.UnionAll": frozenset({"var", "body"}),
    "Core.Union": frozenset({"a", "b"}),
}
# Types JLD2 custom-serializes as ``Nothing`` (src/data/specialcased_types.jl): a value is a ghost.
_WRITTEN_AS_NOTHING = frozenset({"Core.Ptr"})


def _h5_number_type(dtype: np.dtype) -> H5Type:
    """The HDF5 type JLD2 stores a native number as: Bool a 1-byte bitfield, integers fixed-point,
    floats IEEE floating point (all little-endian)."""
    if dtype.kind == "b":
        return bitfield_type(1)
    if dtype.kind in "iu":
        return fixed_type(dtype.itemsize, dtype.kind == "i")
    return float_type(dtype.itemsize)


_CLASS_DECIDES = frozenset({float, bool, complex, str, Symbol, type(None), type(MISSING)})
"""Python classes whose values all have one Julia type (unlike ``int``, which may not fit Int64)."""

_NATIVE_KINDS = "biuf"
"""numpy kinds of the numbers HDF5 stores natively (PRIM); others (bfloat16) are opaque bits."""


_LAYER_FIELDS = 16  # NamedTuples of arrays up to this many fields have their type remembered
_LAYERS_KEPT = 4096

UNION_EL = "inline-union"
"""``JT.layout`` marker of a ``JLD2.InlineUnionEl`` element type (values are converted on write)."""


class TypeFactory:
    """Builds and interns :class:`JT` objects for one write session."""

    def __init__(
        self,
        *,
        dict_as_vector: bool = False,
        pair_name: str = "Core.Pair",
        layouts: Mapping[str, StructLayout] | None = None,
        mutable: frozenset[str] = frozenset(),
    ) -> None:
        # JLD2 < v0.4.42 custom-serialized a Dict as its Vector{Pair{K,V}} (_writer._Format);
        # Julia before 1.7 named Pair Base.Pair (_era: a file re-encoded spells it as it did).
        self.dict_as_vector = dict_as_vector
        self.pair_name = pair_name
        # The struct types a re-encoded file committed, by qualified name (_era.Source.layouts):
        # the fields of a struct type no value shows (see _from_layout).
        self._layouts = layouts or {}
        # Zero-size struct types a re-encoded file shows are mutable (_era.Source.mutable).
        self._mutable = mutable
        self._from_layouts: set[str] = set()  # struct types being built from their layout
        self._cache: dict[str, JT] = {}
        # Fast paths keyed by identity (interned JTs): building key text for every leaf of a
        # 20,000-leaf tree would dominate the write time.
        self._by_dtype: dict[np.dtype, JT] = {}
        self._by_type: dict[JuliaType, JT] = {}
        self._by_class: dict[type, JT] = {}
        self._by_array: dict[tuple[np.dtype, int], JT] = {}  # a numpy array's type: dtype and rank
        self._by_layer: dict[tuple[Any, ...], JT] = {}  # a NamedTuple of arrays' (see of_value)
        self._by_parts: dict[tuple[Any, ...], JT] = {}
        self._building: set[str] = set()  # mutable struct types whose fields are being typed
        self._by_id: dict[int, tuple[Any, JT]] = {}  # the value is kept: its id stays unique
        self._typing: set[int] = set()  # ids of the Dicts and tuples being typed (a cycle is refused)
        # Fields declared abstract of struct types made in Python: struct key -> field names
        # (declare_abstract; JLD2Writer.prepare finds them before any instance is typed).
        self._abstract: dict[str, set[str]] = {}
        self.ANY = self._intern(JT(Cat.ANY, "Core.Any"))
        self.STRING = self._intern(JT(Cat.STRING, "Core.String", mutable=True))
        self.SYMBOL = self._intern(JT(Cat.SYMBOL, "Core.Symbol", mutable=True))
        self.DATATYPE = self._intern(JT(Cat.DATATYPE, "Core.DataType", mutable=True))
        self.NOTHING = self.singleton("Core.Nothing")
        self.MISSING = self.singleton("Base.Missing")
        self.EMPTY_TUPLE = self.tuple_of(())
        self.SERIALIZED_DICT = self._intern(
            JT(Cat.STRUCT, "JLD2.SerializedDict", fields=(("kvvec", self.ANY),), mutable=True)
        )
        self.INT64 = self.prim("Core.Int64")
        self.BOOL = self.prim("Core.Bool")
        self.FLOAT64 = self.prim("Core.Float64")

    def _intern(self, jt: JT) -> JT:
        found = self._cache.get(jt.key)
        if found is not None:
            if found.cat is Cat.OTHER and jt.cat is not Cat.OTHER:
                # A type first met by name only (a type parameter) whose value we now have:
                # upgrade the placeholder in place so every holder of it sees the real type.
                # A storage decision already taken (a reference, as for every type known by
                # name only) stays: data already laid out follows it, so must all later data.
                for slot in JT.__slots__:
                    if slot in ("_kind_init", "_kind_uninit") and getattr(found, slot) is not None:
                        continue
                    setattr(found, slot, getattr(jt, slot))
                # Types built around the placeholder (a Tuple{Inner,Inner} from a type parameter)
                # cached facts about it (isbits, size): let them be worked out again.
                for other in self._cache.values():
                    other._isbits = other._hasdata = other._size = None
            return found
        self._cache[jt.key] = jt
        return jt

    def _get(self, key: str) -> JT | None:
        """A cached type, unless it is only a by-name placeholder."""
        found = self._cache.get(key)
        return None if found is None or found.cat is Cat.OTHER else found

    def lookup(self, key: str) -> JT | None:
        return self._cache.get(key)

    # --- constructors ----------------------------------------------------------------------------
    def prim(self, name: str) -> JT:
        """A native number type by its Julia name (``"Core.Float32"``)."""
        found = self._get(name)
        if found is not None:
            return found
        dtype = numpy_dtype(JuliaType(name))
        if dtype is None or dtype.kind not in _NATIVE_KINDS:
            raise UnsupportedError(f"{name} is not a native number type")
        h5 = _h5_number_type(dtype)
        return self._intern(JT(Cat.PRIM, name, nbytes=h5.size, h5=h5, dtype=dtype))

    def int128(self, signed: bool) -> JT:
        name = "Core.Int128" if signed else "Core.UInt128"
        return self._cache.get(name) or self._intern(JT(Cat.PRIM, name, nbytes=16, h5=fixed_type(16, signed)))

    def bits(self, type_: JuliaType, nbytes: int) -> JT:
        key = type_.qualified()
        found = self._get(key)
        if found is not None:
            return found
        return self._intern(JT(Cat.BITS, type_.name, tuple(type_.params), nbytes=nbytes, key=key))

    def singleton(self, name: str, params: tuple[Any, ...] = ()) -> JT:
        key = type_key(name, params)
        found = self._get(key)
        if found is not None:
            return found
        jt = self._intern(JT(Cat.STRUCT, name, params, key=key, mutable=key in self._mutable))
        if name in _WRITTEN_AS_NOTHING:
            # JLD2's writeas(::Type{Ptr{T}}) = Nothing (since v0.4.0): a pointer means nothing
            # in another process, so its committed type says julia_type Ptr{T}, written_type Nothing.
            jt._writeas = self.NOTHING
        return jt

    def tuple_of(self, elems: Sequence[JT]) -> JT:
        elems = tuple(elems)
        fast = ("T", *map(id, elems))
        found = self._by_parts.get(fast)
        if found is not None:
            return found
        key = type_key("Core.Tuple", elems)
        found = self._cache.get(key)
        if found is not None:
            self._by_parts[fast] = found
            return found
        fields = tuple((str(i), e) for i, e in enumerate(elems, 1))
        jt = self._intern(JT(Cat.STRUCT, "Core.Tuple", elems, fields=fields, is_tuple=True, key=key))
        if len(elems) > NTUPLE_INLINE_THRESHOLD and all(e is elems[0] for e in elems):
            jt._writeas = self.array_of(elems[0], 1)
        self._by_parts[fast] = jt
        return jt

    def namedtuple_of(self, names: Sequence[str], types: Sequence[JT]) -> JT:
        tup = self.tuple_of(types)
        fast = ("NT", id(tup), *names)
        found = self._by_parts.get(fast)
        if found is not None:
            return found
        names_param = tuple(Symbol(n) for n in names)
        key = type_key("Core.NamedTuple", (names_param, tup))
        found = self._cache.get(key)
        if found is None:
            fields = tuple(zip(names, types))
            found = self._intern(
                JT(Cat.STRUCT, "Core.NamedTuple", (names_param, tup), fields=fields, key=key)
            )
        self._by_parts[fast] = found
        return found

    def array_of(self, eltype: JT, ndims: int) -> JT:
        fast = ("A", id(eltype), ndims)
        found = self._by_parts.get(fast)
        if found is not None:
            return found
        params = (eltype, np.int64(ndims))
        key = type_key("Core.Array", params)
        found = self._cache.get(key)
        if found is None:
            found = self._intern(
                JT(Cat.ARRAY, "Core.Array", params, mutable=True, eltype=eltype, ndims=ndims, key=key)
            )
        self._by_parts[fast] = found
        return found

    def complex_of(self, part: JT) -> JT:
        key = type_key("Base.Complex", (part,))
        return self._cache.get(key) or self._intern(
            JT(Cat.STRUCT, "Base.Complex", (part,), fields=(("re", part), ("im", part)), key=key)
        )

    def pair_of(self, k: JT, v: JT) -> JT:
        name = self.pair_name
        key = type_key(name, (k, v))
        return self._cache.get(key) or self._intern(
            JT(Cat.STRUCT, name, (k, v), fields=(("first", k), ("second", v)), key=key)
        )

    def dict_of(self, k: JT, v: JT, name: str = "Base.Dict") -> JT:
        """``Dict{k,v}``, or another of the Dicts JLD2 writes as a ``SerializedDict``
        (``name``: ``Base.IdDict``, ``Base.ImmutableDict``)."""
        key = type_key(name, (k, v))
        found = self._cache.get(key)
        if found is not None:
            return found
        jt = self._intern(JT(Cat.DICT, name, (k, v), mutable=True, key=key))
        jt._writeas = self.array_of(self.pair_of(k, v), 1) if self.dict_as_vector else self.SERIALIZED_DICT
        return jt

    def other(self, type_: JuliaType) -> JT:
        key = type_.qualified()
        return self._cache.get(key) or self._intern(JT(Cat.OTHER, type_.name, tuple(type_.params), key=key))

    # --- from numpy ------------------------------------------------------------------------------
    def of_dtype(self, dtype: np.dtype, path: Sequence[PathSegment] = ()) -> JT:
        """The Julia element type of a numpy dtype (byte order is normalized when writing)."""
        found = self._by_dtype.get(dtype)
        if found is None:
            found = self._by_dtype[dtype] = self._of_dtype(np.dtype(dtype), path)
        return found

    def _of_dtype(self, dt: np.dtype, path: Sequence[PathSegment]) -> JT:
        return self.of_type(julia_eltype(dt, path=path))

    # --- from Julia type text (type parameters, JuliaArray element types) ------------------------
    def of_type(self, t: JuliaType) -> JT:
        """A :class:`JT` for a type known only by its :class:`JuliaType` (a type parameter)."""
        found = self._cache.get(t.qualified())
        if found is not None:
            return found
        name, params = qualified_name(t.name), t.params  # "Float64" as Julia prints it: Core.Float64
        if not params:
            dtype = numpy_dtype(JuliaType(name))
            if dtype is not None:
                if dtype.kind in _NATIVE_KINDS:
                    return self.prim(name)
                return self.bits(JuliaType(name), dtype.itemsize)  # BFloat16
        if any(isinstance(p, JuliaStruct) and p.type.name == "Core.TypeVar" for p in params):
            return self.other(t)  # the body of a where type (Dict{K,V}): a type by name only
        if name in ("Core.Int128", "Core.UInt128") and not params:
            return self.int128(name == "Core.Int128")
        if (is_bigint_name(name) or is_bigfloat_name(name)) and not params:
            return self.bigint(name)
        if name == "Core.String" and not params:
            return self.STRING
        if name == "Core.Symbol" and not params:
            return self.SYMBOL
        if name == "Core.Any" and not params:
            return self.ANY
        if name == "Core.DataType" and not params:
            return self.DATATYPE
        if name in ("Core.Nothing", "Base.Missing") and not params:
            return self.singleton(name)
        if name in _WRITTEN_AS_NOTHING:
            return self.singleton(name, tuple(params))
        if name in _TUPLE_NAMES:
            if not all(isinstance(p, JuliaType) for p in params):
                # A tuple type with value parameters (StaticArrays' Tuple{2,3}): a type parameter
                # only, never the type of a value; written by name with its parameters.
                return self._tuple_by_name(t, tuple(params))
            elems = [self._param_type(p) for p in params]
            if any(_abstract(e) for e in elems):
                # Tuple{Any,Any}: Julia's tuple type is concrete only when every element type
                # is, so JLD2 stores a field or Dict value declared so by reference (to the
                # value's own concrete tuple), as for Any; known by name, like a Union.
                return self._tuple_by_name(t, tuple(elems))
            return self.tuple_of(elems)
        if name in _UNION_NAMES:
            members = tuple(self.of_type(p) if isinstance(p, JuliaType) else p for p in params)
            return self._intern(
                JT(Cat.UNION, "Core.Union", members, key=t.qualified(), raw_params=tuple(params))
            )
        if name == "NTuple" and len(params) == 2 and isinstance(params[0], (int, np.integer)):
            return self.of_type(JuliaType("Core.Tuple", (params[1],) * int(params[0])))
        if name == "Core.NamedTuple" and len(params) == 2 and isinstance(params[0], tuple):
            tup = self._param_type(params[1])
            if tup.is_tuple and len(tup.fields) == len(params[0]):
                return self.namedtuple_of([str(s) for s in params[0]], [ft for _, ft in tup.fields])
        if name == "Core.Array" and len(params) == 2 and isinstance(params[1], (int, np.integer)):
            return self.array_of(self._param_type(params[0]), int(params[1]))
        if name == "Base.Complex" and len(params) == 1:
            return self.complex_of(self._param_type(params[0]))
        if name in ("Core.Pair", "Base.Pair") and len(params) == 2:
            return self.pair_of(self._param_type(params[0]), self._param_type(params[1]))
        if name in SERIALIZED_DICTS and len(params) == 2:
            return self.dict_of(self._param_type(params[0]), self._param_type(params[1]), name)
        return self._from_layout(t) or self.other(t)

    def _tuple_by_name(self, t: JuliaType, params: tuple[Any, ...]) -> JT:
        """A tuple type no value has (a type parameter), written by name with its parameters."""
        key = t.qualified()
        found = self._cache.get(key)
        if found is None:
            found = self._intern(
                JT(Cat.OTHER, "Core.Tuple", params, key=key, is_tuple=True, raw_params=tuple(t.params))
            )
        return found

    def _from_layout(self, t: JuliaType) -> JT | None:
        """A struct type known by name only (no value of it is written: the element type of an
        empty Dict, a type parameter), built from the layout the re-encoded file committed.

        JLD2 decides how to store a type from the Julia type, not from values: a type parameter
        that is an immutable struct is committed (``refs_from_types``), and committing a struct
        commits its fields' types, so a file holding an empty ``Dict{String, Set{Foo}}`` holds
        the committed types of ``Set{Foo}`` and ``Foo``. ``None`` when the file committed no
        such struct, or when a field's type is not known from the layout alone."""
        key = t.qualified()
        layout = self._layouts.get(key)
        if layout is None or layout.written_type is not None or key in self._from_layouts:
            return None
        if not layout.fields:
            return self.singleton(t.name, tuple(t.params))  # an empty committed type: a ghost
        self._from_layouts.add(key)
        try:
            fields = [(fl.name, self._layout_field_type(fl)) for fl in layout.fields]
        except TreexchangeError:
            return None  # (a field type beyond the limits: the struct stays known by name only)
        finally:
            self._from_layouts.discard(key)
        if any(ft is None for _, ft in fields):
            return None
        typed = tuple((n, ft) for n, ft in fields if ft is not None)
        return self._intern(
            JT(
                Cat.STRUCT,
                t.name,
                tuple(t.params),
                fields=typed,
                key=key,
                raw_params=tuple(t.params),
                layout=layout,
            )
        )

    def _layout_field_type(self, fl: FieldLayout) -> JT | None:
        """The declared type of one field of a committed layout, ``None`` when unknown: an inline
        field's committed type or plain HDF5 number/string type, a reference field's committed
        type (which must then be stored by reference) or ``Any``."""
        if fl.field_type is not None:
            if fl.field_type.name == "Core.DataType":
                return self.DATATYPE
            ft = self.of_type(fl.field_type)
            if ft.cat is Cat.OTHER:
                return None
            inline = ft.cat in (Cat.PRIM, Cat.BITS) or (ft.cat is Cat.STRUCT and not ft.mutable)
            if fl.storage == "reference" and inline:
                return None  # (a field that may be #undef: not told by the layout)
            return ft
        if fl.storage == "reference":
            return self.ANY
        return None if fl.h5type is None else self._plain_member_type(fl.h5type)

    def _param_type(self, p: Any) -> JT:
        if isinstance(p, JuliaType):
            return self.of_type(p)
        if isinstance(p, JuliaStruct) and p.type.name == "Core.UnionAll":
            return self.of_type(where_type(p))  # Array{Foo{T} where T, 1}
        raise UnsupportedError(f"expected a type parameter, found the value {p!r}")

    # --- from values -------------------------------------------------------------------------------
    def of_value(self, value: Any, path: Sequence[PathSegment] = ()) -> JT:
        """The Julia type of a value-model value (raises ConversionError with the tree path).

        The type is the one :func:`treexchange._typeof.type_of` decides (what ``inspect`` and the
        schema show), built as interned :class:`JT` by this factory's ``for_*`` methods, with
        the writer's additions: struct layouts, byte sizes, and ``Type{T}`` stored as a DataType.
        """
        found = self._by_class.get(type(value))
        if found is not None:
            return found  # a float, a str, ...: the Python type alone decides
        if type(value) is np.ndarray:  # decided by dtype and rank alone (type_of's array rule)
            key = (value.dtype, value.ndim)
            found = self._by_array.get(key)
            if found is None:
                found = self._by_array[key] = type_of(value, self, tuple(path))
            return found
        if type(value) is JlNamedTuple and len(value) <= _LAYER_FIELDS:
            # A layer (weight, bias ...): decided by its names and its arrays' dtypes and ranks,
            # and met by the thousand in a model.
            fields = value._data
            parts: list[Any] = list(fields)
            for v in fields.values():
                if type(v) is not np.ndarray:
                    break
                parts.append(v.dtype)
                parts.append(v.ndim)
            else:
                layer_key = tuple(parts)
                found = self._by_layer.get(layer_key)
                if found is None:
                    found = type_of(value, self, tuple(path))
                    if len(self._by_layer) < _LAYERS_KEPT:
                        self._by_layer[layer_key] = found
                return found
        path = tuple(path)
        if isinstance(value, dict) or (type(value) is tuple and len(value) > _LAYER_FIELDS):
            # Memoized per object: a Dict's type needs its values' types, and nested Dicts would
            # otherwise be typed again at every level above them (quadratic in the depth); a
            # long tuple (a model's layers) is typed once, not at each level that asks.
            memo = self._by_id.get(id(value))
            if memo is None:
                if id(value) in self._typing:
                    # (a Dict holding itself, read from a BSON.jl file: JLD2 stores a Dict as the
                    # pairs it holds, so it has no form for one among its own entries)
                    raise ConversionError("a Dict that contains itself cannot be written as JLD2", path=path)
                self._typing.add(id(value))
                try:
                    memo = self._by_id[id(value)] = (value, type_of(value, self, path))
                finally:
                    self._typing.discard(id(value))
            return memo[1]
        if value is UNDEF:
            raise ConversionError(
                "#undef (treexchange.UNDEF) can only be stored where Julia keeps a reference: an "
                "element of a list or of an array of non-bits values, or a struct field stored as a "
                "reference (not a top-level value, a tuple or NamedTuple element, or a Dict entry)",
                path=path,
            )
        found = type_of(value, self, path)
        if type(value) in _CLASS_DECIDES:
            self._by_class[type(value)] = found
        return found

    # --- the TypeBuilder of type_of: how the writer spells each decision ------------------------
    def of(self, value: Any, path: TreePath) -> JT:
        return self.of_value(value, path)

    def for_type(self, t: JuliaType, path: TreePath) -> JT:
        found = self._by_type.get(t)
        if found is None:
            found = self._by_type[t] = self.of_type(t)
        return found

    def for_dtype(self, dtype: np.dtype, path: TreePath) -> JT:
        return self.of_dtype(dtype, path)

    def for_namedtuple(self, names: list[str], fields: list[JT]) -> JT:
        return self.namedtuple_of(names, fields)

    def for_tuple(self, elems: list[JT]) -> JT:
        return self.tuple_of(elems)

    def for_list(self, value: list[Any], path: TreePath) -> JT:
        return self.array_of(self.ANY, 1)  # the elements are typed as they are written

    def for_array(self, eltype: JT, ndims: int) -> JT:
        return self.array_of(eltype, ndims)

    def for_array_eltype(self, value: JuliaArray, path: TreePath) -> JT:
        return self._array_eltype(value, path)

    def for_dict(self, key: JT, value: JT) -> JT:
        return self.dict_of(key, value)

    def for_declared_dict(
        self, declared: JuliaType, keys: set[JT], values: set[JT], path: TreePath
    ) -> JT | None:
        return self._kept_dict_type(declared, keys, values)

    def for_struct(self, value: JuliaStruct, path: TreePath) -> JT:
        return self._struct_type(value, path)

    def for_bits(self, value: JuliaBits, path: TreePath) -> JT:
        return self.bits(value.type, len(value.data))

    def for_singleton(self, value: Singleton, path: TreePath) -> JT:
        if isinstance(value, Closure) and value.captures:
            closure_as_struct(value, path)  # (captures without names: refused, never dropped)
        if is_type_singleton(value):
            return self.DATATYPE  # the value T of type Type{T}: JLD2 stores it as a DataType
        return self.singleton(value.type.name, tuple(value.type.params))

    def _array_eltype(self, value: JuliaArray, path: tuple[PathSegment, ...]) -> JT:
        if value.eltype.name in _UNION_NAMES:
            union = self.of_type(value.eltype)
            members = [p for p in union.params if isinstance(p, JT)]
            if len(members) == 2 == len(union.params) and all(m.isbits for m in members):
                return self._inline_union(value.eltype, path)
            return union  # an array of references, its julia_type a Core.Union dataset
        jt = self.of_type(value.eltype)
        if jt.cat is Cat.OTHER:
            # An element type known only by name (a struct, an @enum): take its layout from an
            # element, before anything is laid out with it.
            for i, item in enumerate(value.data.ravel(order="F"), 1):
                if isinstance(item, JuliaStruct) and item.type == value.eltype:
                    return self._struct_type(item, (*path, i))
                if isinstance(item, JuliaBits) and item.type == value.eltype and item.data:
                    return self.bits(item.type, len(item.data))
        return jt

    def _inline_union(self, union: JuliaType, path: tuple[PathSegment, ...]) -> JT:
        """The element type JLD2 writes for an array of a two-member bits ``Union`` (e.g.
        ``Vector{Union{Nothing,Float64}}``): ``JLD2.InlineUnionEl{T1,T2}`` = ``(mask::UInt8,
        t1::T1, t2::T2)``, mask 0 for a ``T1`` element and 255 for a ``T2`` one (JLD2's
        src/inlineunion.jl). Other unions would need JLD2's Union datasets: not supported."""
        members = [self.of_type(p) if isinstance(p, JuliaType) else None for p in union.params]
        if len(members) != 2 or any(m is None or not m.isbits for m in members):
            raise UnsupportedError(
                f"arrays of {union} cannot be written (only two-member Unions of bits types are)", path=path
            )
        t1, t2 = members
        if t1 is None or t2 is None:  # excluded above; spelled out for the type checker
            raise UnsupportedError(f"arrays of {union} cannot be written", path=path)
        key = type_key("JLD2.InlineUnionEl", (t1, t2))
        found = self._get(key)
        if found is not None:
            return found
        fields = (("mask", self.prim("Core.UInt8")), ("t1", t1), ("t2", t2))
        return self._intern(
            JT(Cat.STRUCT, "JLD2.InlineUnionEl", (t1, t2), fields=fields, key=key, layout=UNION_EL)
        )

    def _kept_dict_type(self, read: Any, key_types: set[JT], value_types: set[JT]) -> JT | None:
        """The Dict type a file stored (``JuliaDict.julia_type``), if the entries still fit it:
        JLD2 writes a Dict under its own type (``IdDict``, ``ImmutableDict``, ``Dict{Any,Any}``
        of Float64 values), which the entries alone do not tell."""
        if not isinstance(read, JuliaType) or read.name not in SERIALIZED_DICTS or len(read.params) != 2:
            return None
        try:
            # (A parameter may be a where type, a UnionAll value: Dict{String, Array{Float64,N}
            # where N}; JLD2 writes it as a UnionAll dataset, the type parameter it is.)
            k, v = (self._param_type(p) for p in read.params)
        except TreexchangeError:
            return None

        def fits(declared: JT, found: set[JT]) -> bool:
            # An abstract declared type (Any, a Union, a type known by name) holds anything by
            # reference; a concrete one must be the entries' own type (``_typeof._holds``, the
            # same rule on JuliaTypes).
            return declared.cat in (Cat.ANY, Cat.UNION, Cat.OTHER) or all(t is declared for t in found)

        if not (fits(k, key_types) and fits(v, value_types)):
            return None
        return self.dict_of(k, v, read.name)

    def kvvec_dict_type(self, value: JuliaStruct, path: tuple[PathSegment, ...]) -> JT | None:
        """The Dict type of a Dict read in its stored form ``JuliaStruct(Dict{K,V}, kvvec=...)``
        (keys Python cannot hash, or keys equal in Python but not in Julia), else None."""
        t = value.type
        if t.name not in SERIALIZED_DICTS or len(t.params) != 2 or list(value.fields) != ["kvvec"]:
            return None
        if value.layout is not None or not all(isinstance(p, JuliaType) for p in t.params):
            return None
        return self.dict_of(self.of_type(t.params[0]), self.of_type(t.params[1]), t.name)

    def _struct_type(self, value: JuliaStruct, path: tuple[PathSegment, ...]) -> JT:
        as_dict = self.kvvec_dict_type(value, path)
        if as_dict is not None:
            return as_dict
        key = value.type.qualified()
        mutable = value.mutable or value.type.name in _MUTABLE_BUILTINS
        found = self._get(key)
        if found is not None and key in self._building:
            return found  # a mutable struct type whose fields reach itself (Node.parent::Node)
        if found is not None:
            if mutable and not found.mutable:
                self._make_mutable(found, path)
            # One Julia type has one set of fields: a second value of the same type must agree.
            names = [n for n, _ in (found.writeas if found.writeas.cat is Cat.STRUCT else found).fields]
            if found.cat is not Cat.STRUCT or list(value.fields) != names:
                raise ConversionError(
                    f"struct type {value.type} appears with fields {list(value.fields)} and with {names}",
                    path=path,
                )
            if value.layout is None:  # (a struct read from a file has its declared field types)
                self._check_ghost_fields(found, value, path)
            return found
        layout = value.layout
        if layout is not None and layout.written_type is not None and layout.h5type.cls is H5Class.VLEN:
            return self._written_as_string(value, layout, key, path)
        fields: list[tuple[str, JT]] = []
        jt = JT(
            Cat.STRUCT,
            value.type.name,
            tuple(value.type.params),
            key=key,
            raw_params=tuple(value.type.params),
            layout=layout,
            mutable=mutable,
        )
        if mutable:
            # Known (interned) before its fields are typed: a field may hold a struct of this
            # very type (a tree whose nodes point to their parent).
            jt = self._intern(jt)
            self._building.add(key)
        try:
            self._struct_fields(value, layout, fields, path)
        finally:
            self._building.discard(key)
        jt.fields = tuple(fields)
        if layout is not None and layout.written_type is not None:
            # JLD2 custom serialization (``writeas``): the fields are those of the written type.
            wt = layout.written_type
            written = JT(
                Cat.STRUCT,
                wt.name,
                tuple(wt.params),
                fields=tuple(fields),
                key=wt.qualified() + " (written)",
                raw_params=tuple(wt.params),
                mutable=mutable,
            )
            jt._writeas = self._intern(written)
        return self._intern(jt)

    def declare_abstract(self, key: str, name: str) -> None:
        """Declare field ``name`` of the struct type ``key`` (made in Python or read from BSON:
        no declared field types) ``Any``: its instances hold values of several types, which
        Julia allows only in a field declared with a type that is not concrete (``Any``, an
        abstract type, a ``Union`` such as Flux's ``active::Union{Bool, Nothing}``). JLD2.jl
        stores every such field by reference (``fieldodr`` in src/data/writing_datatypes.jl:
        ``RelOffset`` for any field type that is not concrete), each value a dataset of its
        own type, whatever the declaration: the file is the same. Call it before any instance of
        ``key`` is typed (the first one typed fixes the fields); a type typed already (an earlier
        write to this file) keeps its fields."""
        if self._get(key) is None:
            self._abstract.setdefault(key, set()).add(name)

    def _check_ghost_fields(self, found: JT, value: JuliaStruct, path: tuple[PathSegment, ...]) -> None:
        """That each field of ``value`` (a struct made in Python) that ``found``, its type as
        another instance fixed it, declares a ghost (``Tuple{}``, ``Nothing``, a struct without
        fields: no stored data) holds a value of that type. Other fields are checked as they are
        encoded; a ghost's bytes are not written at all, so another value would be lost without
        a word (``[JuliaStruct("Main.S", {"x": 0}), JuliaStruct("Main.S", {"x": ()})]`` read back
        as two ``Singleton("Main.S")``: the instance typed first made ``x`` a ``Tuple{}``)."""
        for (name, declared), v in zip(found.fields, value.fields.values()):
            if declared.writeas.hasfielddata or v is UNDEF:
                continue
            got = self.of_value(v, (*path, name))
            if got is not declared and got.key != declared.key:
                raise ConversionError(
                    f"{name!r} is a {shown_type(got)}, but another instance of {value.type} made it a "
                    f"{shown_type(declared)}, which stores no data (the value would be lost); a Julia struct "
                    f"type has one type per field: give every instance's {name!r} the same type",
                    path=(*path, name),
                )

    def _written_as_string(
        self, value: JuliaStruct, layout: Any, key: str, path: tuple[PathSegment, ...]
    ) -> JT:
        """A struct custom-serialized as a ``String`` (JLD2's ``writeas(::Type{BigInt}) = String``),
        read as its one ``written`` field: JLD2 commits the variable-length string type itself with
        ``julia_type`` the struct and ``written_type`` ``Core.String``, and stores the text inline
        (a 16-byte heap reference) wherever the struct is a field."""
        text = value.fields.get("written")
        if (
            layout.written_type.name != self.STRING.name
            or list(value.fields) != ["written"]
            or not isinstance(text, str)
        ):
            raise UnsupportedError(
                f"struct {value.type} is custom-serialized as {layout.written_type}; only a String "
                "(its text in the field 'written') or a struct can be written",
                path=path,
            )
        return self._string_serialized(value.type, layout, key)

    def bigint(self, name: str) -> JT:
        """Julia's ``BigInt`` (a :class:`treexchange.BigInt`, or a Python ``int`` too wide for
        ``Int128``) or ``BigFloat`` (a :class:`treexchange.BigFloat`) under the name ``name`` it is
        written with: JLD2's ``writeas(::Union{Type{BigInt},Type{BigFloat}}) = String`` stores its
        text (a BigInt's in base 62, a BigFloat's decimal), committing the string type as for
        :meth:`_written_as_string`."""
        t = JuliaType(name)
        key = t.qualified()
        found = self._get(key)
        if found is not None:
            return found
        layout = StructLayout(t, VLEN_UTF8, (), written_type=JuliaType(self.STRING.name))
        return self._string_serialized(t, layout, key)

    def _string_serialized(self, t: JuliaType, layout: StructLayout, key: str) -> JT:
        jt = JT(
            Cat.STRUCT,
            t.name,
            tuple(t.params),
            fields=(("written", self.STRING),),
            key=key,
            raw_params=tuple(t.params),
            layout=layout,
        )
        jt._writeas = self.STRING
        return self._intern(jt)

    def _make_mutable(self, jt: JT, path: tuple[PathSegment, ...]) -> None:
        """A struct type first met through an instance not flagged mutable, then through one
        that is: the type is mutable (Julia mutability is a property of the type), provided
        nothing has been decided from it yet."""
        if jt._kind_init is not None or jt._kind_uninit is not None:
            raise ConversionError(
                f"struct type {jt.key} is used as immutable before an instance marked mutable; "
                "mark every instance of a mutable struct type mutable=True",
                path=path,
            )
        jt.mutable = True
        if jt._writeas is not None:
            jt._writeas.mutable = True
        # Types built around it cached facts that depend on it (isbits, size): work them out again.
        for other in self._cache.values():
            other._isbits = other._hasdata = other._size = None

    def _struct_fields(
        self,
        value: JuliaStruct,
        layout: Any,
        fields: list[tuple[str, JT]],
        path: tuple[PathSegment, ...],
    ) -> None:
        """The Julia type of each field of ``value`` (appended to ``fields``)."""
        if layout is not None and layout.written_type is not None and layout.h5type.cls != H5Class.COMPOUND:
            raise UnsupportedError(
                f"struct {value.type} is custom-serialized as {layout.written_type}; only struct-to-struct "
                "custom serialization can be written",
                path=path,
            )
        if layout is None:
            abstract = self._abstract.get(value.type.qualified()) if self._abstract else None
            declared_any = _ANY_FIELDS.get(value.type.name, frozenset())
            for name, v in value.fields.items():
                # An #undef field of a struct made in Python: declared Any, a NULL reference; so
                # is a field whose instances hold values of several types (declare_abstract), and
                # a field Julia declares Any in a Core type (a TypeVar's bounds).
                if v is UNDEF or name in declared_any or (abstract is not None and name in abstract):
                    fields.append((name, self.ANY))
                    continue
                fields.append((name, self.of_value(v, (*path, name))))
        else:
            for fl in layout.fields:
                if fl.name not in value.fields:
                    raise ConversionError(f"struct {value.type} has no field {fl.name!r}", path=path)
                v = value.fields[fl.name]
                fpath = (*path, fl.name)
                if v is UNDEF:
                    fields.append((fl.name, self._undefined_field_type(fl, fpath)))
                elif fl.storage == "reference" and fl.field_type is None:
                    fields.append((fl.name, self.ANY))
                elif fl.storage == "inline" and fl.field_type is None and fl.member is not None:
                    fields.append((fl.name, self._member_type(fl.member.type, v, fpath)))
                elif (
                    fl.storage == "inline"
                    and fl.field_type is not None
                    and fl.field_type.name == "Core.DataType"
                ):
                    fields.append((fl.name, self.DATATYPE))  # a field declared ::DataType holds a type
                else:
                    fields.append((fl.name, self.of_value(v, fpath)))

    def _undefined_field_type(self, fl: Any, path: tuple[PathSegment, ...]) -> JT:
        """The declared type of a field (a ``FieldLayout``) that holds :data:`~treexchange.UNDEF`.

        JLD2 can store an undefined field only where it stores a pointer: a reference (written
        as NULL) or a String/Symbol heap reference (16 zero bytes), its ``h5convert_uninitialized!``
        methods; an inline struct field has no undefined form."""
        member = fl.member.type if fl.member is not None else None
        vlen = member is not None and member.cls == H5Class.VLEN and member.is_vlen_string
        if fl.storage == "reference" or (fl.storage == "inline" and vlen):
            if fl.field_type is not None:
                return self.of_type(fl.field_type)
            return self.STRING if vlen else self.ANY
        raise ConversionError(
            f"#undef (treexchange.UNDEF) in field {fl.name!r}, which is stored inline: "
            "only a field stored as a reference can be undefined",
            path=path,
        )

    def _member_type(self, t: H5Type, value: Any, path: tuple[PathSegment, ...]) -> JT:
        """The declared type of an inline field stored with its plain HDF5 type (NULL field_types)."""
        plain = self._plain_member_type(t)
        return plain if plain is not None else self.of_value(value, path)

    def _plain_member_type(self, t: H5Type) -> JT | None:
        """The Julia type a plain HDF5 member type stands for (numbers, Bool, String, a
        reference: ``Any``); ``None`` for others (the value then tells)."""
        if t.cls == H5Class.BITFIELD and t.size == 1:
            return self.BOOL
        if t.cls in (H5Class.FIXED, H5Class.FLOAT):
            dt = t.numpy_dtype()
            if dt is not None:
                return self.of_dtype(dt)
            if t.cls == H5Class.FIXED and t.size == 16:
                return self.int128(t.signed)
        if t.cls == H5Class.VLEN and t.is_vlen_string:
            return self.STRING
        if t.cls == H5Class.REFERENCE:
            return self.ANY
        return None


def is_type_singleton(value: Singleton) -> bool:
    """Whether ``value`` is ``Singleton(Type{T})``: how the reader gives a type value ``T``."""
    t = value.type
    return t.name == "Core.Type" and len(t.params) == 1 and isinstance(t.params[0], JuliaType)


def written_text(value: Any) -> Any:
    """The String a struct custom-serialized as a String (``JLD2.writeas(BigInt) = String``) is
    written as: a ``BigInt`` (an ``int``) as its base-62 text, a ``BigFloat`` as its decimal
    text; a struct read as its one ``written`` field, that field."""
    if isinstance(value, JuliaStruct):
        return value.fields["written"]
    if isinstance(value, BigFloat):
        return value.text
    if isinstance(value, int) and not isinstance(value, bool):
        return int_to_base62(value)
    return value
