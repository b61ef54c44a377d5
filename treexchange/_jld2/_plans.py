"""Decoding plans: how the bytes of one element of an HDF5 datatype become a value.

A :class:`Plan` is built once per datatype (committed datatypes are cached by address by
:mod:`._typesread`) and then applied to many elements. Plans never touch the file themselves:
whatever needs the file (global-heap strings, object references, type parameters) goes through
the :class:`DecodeContext` the reader passes in. Each plan knows

* ``kind``: the ``inspect`` kind of the values it produces (``"ref"`` for references, whose kind
  is that of the referenced dataset),
* ``julia_type``: the Julia type of those values,
* ``size``: the element size on disk (0 for ghosts, which store nothing),
* ``dtype``: for plain-data plans, the numpy dtype whose arrays view the stored bytes as they are
  (numbers, Bool, Complex, BFloat16); ``None`` otherwise.
* ``array_dtype``: the dtype an *array* of these values is presented with by ``inspect``, the
  lazy nodes and the schema: ``dtype``, or for little-endian ``Int128`` / ``UInt128`` (which
  numpy lacks) a 16-byte void dtype labelled ``int128`` / ``uint128`` (see :func:`wide_int_dtype`).
  ``load`` still decodes those elements one by one into :class:`treexchange.Int128` values.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import ml_dtypes
import numpy as np

from .._errors import FormatError, LimitError, TreePath
from .._hdf5._model import H5Class, H5Type, Member
from .._juliatype import BIGFLOAT_NAME, BIGINT_NAME, JuliaType
from .._limits import Limits
from .._typeof import kind_of, wide_int_dtype
from .._values import (
    BigFloat,
    BigInt,
    Int128,
    JuliaArray,
    JuliaBits,
    JuliaDict,
    JuliaStruct,
    NamedTuple,
    Singleton,
    Symbol,
    UInt128,
)
from ._base62 import DIGITS as BASE62_DIGITS
from ._layout import FieldLayout, StructLayout

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class DecodeContext(Protocol):
    """What plans need from the reader."""

    limits: Limits
    # Limits for element counts that cost no bytes in the file (zero-size elements): also
    # bounded by the file size (see Reader.type_limits).
    type_limits: Limits

    def heap_bytes(self, buf: Any, off: int) -> memoryview | bytes:
        """The global-heap payload of the 16-byte vlen element at ``buf[off:]`` (b"" when empty)."""
        ...

    def load_ref(self, address: int, path: TreePath) -> Any:
        """The value of the object at relative ``address`` (``UNDEF`` for a NULL reference)."""
        ...

    def flag_mutable(self, value: JuliaStruct) -> None:
        """The file shows ``value``'s type is a mutable struct: flag it and every other struct
        of that type this traversal has read or will read."""
        ...

    def decode_datatype(self, buf: Any, off: int, path: TreePath) -> JuliaType:
        """A ``Core.DataType`` element (name + parameter references) as a :class:`JuliaType`."""
        ...

    def decode_union(self, buf: Any, off: int, path: TreePath) -> JuliaType:
        """A ``Core.Union`` element as ``JuliaType("Core.Union", members)``."""
        ...


def decode_text(raw: bytes | memoryview) -> str:
    """UTF-8 text as Julia stores it; invalid bytes survive as surrogate escapes (re-encodable)."""
    return bytes(raw).decode("utf-8", "surrogateescape")


class Plan:
    """Base class; see the module docstring."""

    kind: str = "struct"
    julia_type: JuliaType
    size: int = 0
    h5type: H5Type | None = None
    dtype: np.dtype | None = None

    @property
    def array_dtype(self) -> np.dtype | None:
        """The dtype arrays of these values are presented with (see the module docstring)."""
        return self.dtype

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        raise NotImplementedError

    def decode_many(self, ctx: DecodeContext, buf: Any, count: int, path: TreePath) -> list[Any]:
        """``count`` consecutive elements (paths get 1-based positions)."""
        size = self.size
        return [self.decode(ctx, buf, i * size, (*path, i + 1)) for i in range(count)]

    @property
    def element_type(self) -> JuliaType:
        """The Julia element type of an array of these values."""
        return self.julia_type

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.julia_type.qualified()}, size={self.size})"


# --- plain data -------------------------------------------------------------------------------


class NumberPlan(Plan):
    """Integers, IEEE floats and ``Complex{Float32/Float64}`` (compound ``re``, ``im``) that numpy
    represents exactly (scalars come out native-endian)."""

    kind = "number"

    def __init__(self, dtype: np.dtype, julia_type: JuliaType, h5type: H5Type | None = None) -> None:
        self.dtype = np.dtype(dtype)
        self.native = self.dtype.newbyteorder("=")
        self.julia_type = julia_type
        self.size = self.dtype.itemsize
        self.h5type = h5type

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        value = np.frombuffer(buf, self.dtype, 1, off)
        if value.dtype != self.native:
            value = value.astype(self.native)
        return value[0]


class BoolPlan(Plan):
    """``Bool``: one byte (HDF5 bitfield, or opaque ``Core.Bool`` in old files)."""

    kind = "bool"

    def __init__(self, julia_type: JuliaType, h5type: H5Type | None = None) -> None:
        self.dtype = np.dtype(np.bool_)
        self.julia_type = julia_type
        self.size = 1
        self.h5type = h5type

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        return buf[off] != 0


class BFloat16Plan(Plan):
    """``BFloat16`` (committed opaque, 2 bytes) as ``ml_dtypes.bfloat16``."""

    kind = "number"

    def __init__(self, julia_type: JuliaType, h5type: H5Type | None = None) -> None:
        self.dtype = np.dtype(ml_dtypes.bfloat16)
        self.julia_type = julia_type
        self.size = 2
        self.h5type = h5type

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        return np.frombuffer(buf, self.dtype, 1, off)[0]


class Int128Plan(Plan):
    """``Int128`` / ``UInt128`` as :class:`treexchange.Int128` / :class:`treexchange.UInt128`."""

    kind = "number"

    def __init__(self, signed: bool, byteorder: str, julia_type: JuliaType, h5type: H5Type | None) -> None:
        self.signed = signed
        self.byteorder: Any = "big" if byteorder == ">" else "little"
        self.julia_type = julia_type
        self.size = 16
        self.h5type = h5type

    @property
    def array_dtype(self) -> np.dtype | None:
        # Little-endian only: the presented bytes are then the stored bytes (what sha256 hashes).
        return wide_int_dtype(self.signed) if self.byteorder == "little" else None

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        value = int.from_bytes(bytes(buf[off : off + 16]), self.byteorder, signed=self.signed)
        return Int128(value) if self.signed else UInt128(value)


class BitsPlan(Plan):
    """A primitive bits type numpy has no dtype for (``Char``, ``@enum``...) as :class:`JuliaBits`."""

    kind = "number"

    def __init__(self, julia_type: JuliaType, size: int, h5type: H5Type | None) -> None:
        self.julia_type = julia_type
        self.size = size
        self.h5type = h5type

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        return JuliaBits(self.julia_type, bytes(buf[off : off + self.size]))


class FixedStringPlan(Plan):
    """A fixed-size HDF5 string (JLD2 writes top-level ``String`` values this way).

    Like JLD2, null-padded and null-terminated strings keep all their bytes (JLD2 writes the
    exact byte length); space-padded ones lose trailing spaces.
    """

    kind = "string"

    def __init__(self, size: int, padding: int, julia_type: JuliaType, h5type: H5Type | None) -> None:
        self.size = size
        self.padding = padding
        self.julia_type = julia_type
        self.h5type = h5type

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        text = decode_text(buf[off : off + self.size])
        return text.rstrip(" ") if self.padding == 2 else text


class VlenStringPlan(Plan):
    """A variable-length string (global heap): ``String``, or ``Symbol`` when committed as such."""

    def __init__(self, symbol: bool, julia_type: JuliaType, h5type: H5Type | None) -> None:
        self.symbol = symbol
        self.kind = "symbol" if symbol else "string"
        self.julia_type = julia_type
        self.size = 16
        self.h5type = h5type

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        text = decode_text(ctx.heap_bytes(buf, off))
        return Symbol(text) if self.symbol else text


class ReferencePlan(Plan):
    """An 8-byte object reference: the value is whatever the referenced object holds."""

    kind = "ref"

    def __init__(self, julia_type: JuliaType, h5type: H5Type | None) -> None:
        self.julia_type = julia_type
        self.size = 8
        self.h5type = h5type

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        return ctx.load_ref(_U64.unpack_from(buf, off)[0], path)

    @staticmethod
    def address(buf: Any, off: int) -> int:
        return int(_U64.unpack_from(buf, off)[0])


class GhostPlan(Plan):
    """A zero-size type: nothing is stored, the value is the type's only instance."""

    size = 0

    def __init__(self, value: Any, julia_type: JuliaType, h5type: H5Type | None) -> None:
        self.value = value
        self.julia_type = julia_type
        self.h5type = h5type
        self.kind = kind_of(value)

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        return self.value


def type_value(t: JuliaType) -> Singleton:
    """A Julia type used as a *value* (a field holding ``Float64``): the only instance of
    ``Type{Float64}``, i.e. ``Singleton(Type{Float64})`` in the value model.

    Example:
        >>> type_value(JuliaType("Core.Float64"))
        Singleton('Core.Type{Core.Float64}')
    """
    return Singleton(JuliaType("Core.Type", (t,)))


def type_of_value(value: Any) -> Any:
    """Inverse of :func:`type_value` (other values unchanged): type parameters are types."""
    if (
        isinstance(value, Singleton)
        and value.type.name == "Core.Type"
        and len(value.type.params) == 1
        and isinstance(value.type.params[0], JuliaType)
    ):
        return value.type.params[0]
    return value


class DataTypePlan(Plan):
    """A ``Core.DataType`` value (the bootstrap compound): decodes to ``Singleton(Type{T})``."""

    kind = "singleton"

    def __init__(self, julia_type: JuliaType, h5type: H5Type | None) -> None:
        self.julia_type = julia_type
        self.size = 32
        self.h5type = h5type

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        return type_value(ctx.decode_datatype(buf, off, path))


class UnionTypePlan(Plan):
    """A ``Core.Union`` type value (compound ``description``, ``datatype``, ``unionall``)."""

    kind = "singleton"

    def __init__(self, julia_type: JuliaType, h5type: H5Type | None) -> None:
        self.julia_type = julia_type
        self.size = 48
        self.h5type = h5type

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        return type_value(ctx.decode_union(buf, off, path))


class LegacyUnionTypePlan(UnionTypePlan):
    """A ``Core.Union`` type value as JLD2 <= v0.1.x wrote it (legacy-header files): an HDF5 vlen
    of ``Core.DataType`` compounds, one per member type (``Base.uniontypes``), 16 bytes inline.
    The value is the same ``Type{Union{...}}`` as :class:`UnionTypePlan`'s."""

    def __init__(self, julia_type: JuliaType, h5type: H5Type | None) -> None:
        super().__init__(julia_type, h5type)
        self.size = 16

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        count = _U32.unpack_from(buf, off)[0]
        payload = ctx.heap_bytes(buf, off)
        if count > ctx.limits.max_elements or count * 32 > len(payload):
            raise FormatError(f"Core.Union of {count} member types does not fit its heap object", path=path)
        members = tuple(ctx.decode_datatype(payload, 32 * i, path) for i in range(count))
        return type_value(JuliaType("Core.Union", members))


class VlenSequencePlan(Plan):
    """An HDF5 variable-length sequence (``Vector{T}``): numpy array or :class:`JuliaArray`."""

    kind = "array"

    def __init__(self, base: Plan, julia_type: JuliaType, h5type: H5Type | None) -> None:
        self.base = base
        self.julia_type = julia_type
        self.size = 16
        self.h5type = h5type
        if base.dtype is None:
            self.kind = "vector"

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        count = _U32.unpack_from(buf, off)[0]
        payload = ctx.heap_bytes(buf, off)
        base = self.base
        # Zero-size elements take no heap bytes, so the heap object does not bound their count.
        limit = (ctx.limits if base.size else ctx.type_limits).max_elements
        if count > limit:
            raise LimitError(
                f"vlen sequence of {count} elements exceeds {limit} (max_elements"
                + (
                    ")"
                    if base.size
                    else ", or max_virtual_elements: by default 16 zero-size elements per byte of file)"
                ),
                path=path,
            )
        if count * base.size > len(payload):
            raise FormatError(f"vlen sequence of {count} elements does not fit its heap object", path=path)
        if base.dtype is not None:
            return np.frombuffer(bytes(payload[: count * base.size]), base.dtype, count).copy()
        return JuliaArray(base.julia_type, base.decode_many(ctx, payload, count, path))


# --- structs ------------------------------------------------------------------------------------


class FieldPlan:
    """One Julia field of a compound plan (see :class:`treexchange._jld2._layout.FieldLayout`)."""

    __slots__ = ("field_type", "member", "name", "offset", "plan", "storage")

    def __init__(
        self,
        name: str,
        storage: str,
        plan: Plan,
        member: Member | None,
        field_type: JuliaType | None,
    ) -> None:
        self.name = name
        self.storage = storage
        self.plan = plan
        self.member = member
        self.offset = 0 if member is None else member.offset
        self.field_type = field_type

    def layout(self) -> FieldLayout:
        return FieldLayout(self.name, self.storage, self.member, self.field_type)  # type: ignore[arg-type]


class CompoundPlan(Plan):
    """A struct stored as an HDF5 compound: ``NamedTuple``, ``Tuple``, or any other struct.

    ``fields`` lists every Julia field in order, ghost fields included (their plan is a
    :class:`GhostPlan`, they occupy no bytes).
    """

    def __init__(
        self,
        kind: str,
        julia_type: JuliaType,
        h5type: H5Type,
        fields: Sequence[FieldPlan],
        layout: StructLayout | None = None,
    ) -> None:
        self.kind = kind
        self.julia_type = julia_type
        self.h5type = h5type
        self.size = h5type.size
        self.fields = tuple(fields)
        self.layout = layout
        self._declared: tuple[JuliaType | None, ...] | None = None
        # The (path segment, key) of each field, as lazy nodes list them: once per type, not
        # once per node (a model has thousands of layers of the same few types).
        self.entries: tuple[tuple[str | int, Any], ...] = (
            tuple((i + 1, i) for i in range(len(self.fields)))
            if kind == "tuple"
            else tuple((f.name, f.name) for f in self.fields)
        )
        self.keys = tuple(key for _, key in self.entries)  # (what a node's keys() copies)
        # Field name -> position (the first field of that name), for lookups by name.
        self.positions: dict[str, int] = {}
        if kind != "tuple":
            for i, f in enumerate(self.fields):
                self.positions.setdefault(f.name, i)
        # Field name -> offset of its reference, for the fields (by name) stored as references
        # (a layer's ``weight``): a lazy walk's one lookup per leaf (CompoundNode.__getitem__).
        self.ref_at: dict[str, int] = {
            name: self.fields[i].offset
            for name, i in self.positions.items()
            if type(self.fields[i].plan) is ReferencePlan and self.fields[i].offset + 8 <= self.size
        }

    def field_values(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> list[Any]:
        tuple_like = self.kind == "tuple"
        out = []
        for i, f in enumerate(self.fields):
            seg: str | int = i + 1 if tuple_like else f.name
            value = f.plan.decode(ctx, buf, off + f.offset, (*path, seg))
            if isinstance(value, JuliaStruct) and not value.mutable and isinstance(f.plan, ReferencePlan):
                declared = self.declared[i]
                if declared is not None and value.type == declared:
                    # A field declared with the struct's own concrete type yet stored by
                    # reference: JLD2 does that for mutable types (and for immutables over
                    # 1024 bytes, flagged too: it changes nothing in how they are written).
                    ctx.flag_mutable(value)
            out.append(value)
        return out

    @property
    def declared(self) -> tuple[JuliaType | None, ...]:
        """The declared type of each field where the file says it: a Tuple's, NamedTuple's or
        Pair's type parameters, a struct's ``field_types`` entries (NULL for reference fields)."""
        found = self._declared
        if found is None:
            found = tuple(f.field_type for f in self.fields)
            params = self.julia_type.params
            if self.kind == "namedtuple" and len(params) == 2 and isinstance(params[1], JuliaType):
                params = params[1].params
            # Pair{A,B} (a Dict's entries) declares ``first::A, second::B`` in its parameters.
            is_pair = self.julia_type.name in ("Core.Pair", "Base.Pair")
            if (self.kind in ("tuple", "namedtuple") or is_pair) and len(params) == len(self.fields):
                found = tuple(p if isinstance(p, JuliaType) else None for p in params)
            self._declared = found
        return found

    def new_struct(self) -> JuliaStruct:
        """An empty struct of this type, to be filled by :meth:`fill` (cycles close on it)."""
        return JuliaStruct(self.julia_type, layout=self.layout)

    def fill(
        self, target: JuliaStruct, ctx: DecodeContext, buf: Any, off: int, path: TreePath
    ) -> JuliaStruct:
        """Decode the fields into ``target`` (made by :meth:`new_struct`); returns it."""
        values = self.field_values(ctx, buf, off, path)
        target.fields.update(zip((f.name for f in self.fields), values))
        return target

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        values = self.field_values(ctx, buf, off, path)
        if self.kind == "tuple":
            return tuple(values)
        names = [f.name for f in self.fields]
        try:
            if self.kind == "namedtuple":
                return NamedTuple(zip(names, values))
            return JuliaStruct(self.julia_type, zip(names, values), layout=self.layout)
        except ValueError as err:  # a field named twice: the compound lies
            raise FormatError(f"{self.julia_type}: {err}", path=path) from None


def mark_mutable(ctx: DecodeContext, items: Sequence[Any], eltype: JuliaType) -> None:
    """Flag the structs of a reference array whose element type is their own concrete type
    and plain bits: JLD2 stores array elements of an ``isbitstype`` struct inline, so by
    reference means mutable. (Elements of other immutable structs, a ``Pair{String,Float64}``,
    are stored by reference too: they may be undefined, JLD2's ``fieldodr(T, false)``.)"""
    # Structs of one plan share their type and layout objects: the answer is worked out once
    # per pair of them (comparing types walks them whole; a Dict has one Pair per entry).
    known: dict[tuple[int, int], bool] = {}
    for item in items:
        if isinstance(item, JuliaStruct) and not item.mutable and item.layout is not None:
            key = (id(item.type), id(item.layout))
            flag = known.get(key)
            if flag is None:
                flag = known[key] = _plain_bits(item.layout) and item.type == eltype
            if flag:
                ctx.flag_mutable(item)


def _plain_bits(layout: StructLayout) -> bool:
    """Whether a struct's stored fields are all inline plain data (no reference, no heap
    string or sequence anywhere inside): what an ``isbitstype`` struct looks like on disk."""
    if layout.written_type is not None:
        return False
    for f in layout.fields:
        if f.storage == "reference" or (f.member is not None and _has_pointer(f.member.type)):
            return False
    return True


def _has_pointer(t: H5Type) -> bool:
    if t.cls in (H5Class.REFERENCE, H5Class.VLEN):
        return True
    if t.base is not None and _has_pointer(t.base):
        return True
    return any(_has_pointer(m.type) for m in t.members)


class UnionElementPlan(Plan):
    """``JLD2.InlineUnionEl{T1,T2}`` (arrays of ``Union{T1,T2}``): ``mask == 0`` selects ``t1``."""

    kind = "union"

    def __init__(self, inner: CompoundPlan, element_type: JuliaType) -> None:
        self.inner = inner
        self.julia_type = inner.julia_type
        self.h5type = inner.h5type
        self.size = inner.size
        self._element_type = element_type
        by_name = {f.name: f for f in inner.fields}
        if not {"mask", "t1", "t2"} <= set(by_name):
            raise FormatError(f"{inner.julia_type.qualified()} lacks mask/t1/t2 fields")
        self.mask, self.t1, self.t2 = by_name["mask"], by_name["t1"], by_name["t2"]

    @property
    def element_type(self) -> JuliaType:
        return self._element_type

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        chosen = self.t1 if buf[off + self.mask.offset] == 0 else self.t2
        return chosen.plan.decode(ctx, buf, off + chosen.offset, path)


class CustomPlan(Plan):
    """Custom serialization (``written_type``): decode the written form, then convert it."""

    def __init__(
        self,
        kind: str,
        julia_type: JuliaType,
        inner: Plan,
        convert: Callable[[Any, TreePath], Any],
    ) -> None:
        self.kind = kind
        self.julia_type = julia_type
        self.inner = inner
        self.h5type = inner.h5type
        self.size = inner.size
        self.convert = convert

    def decode(self, ctx: DecodeContext, buf: Any, off: int, path: TreePath) -> Any:
        return self.convert(self.inner.decode(ctx, buf, off, path), path)


# --- conversions used by custom plans ---------------------------------------------------------


def elements_of(value: Any) -> list[Any]:
    """The elements of a decoded 1-D array (list, JuliaArray, numpy) in Julia order."""
    if isinstance(value, list):
        return value
    if isinstance(value, JuliaArray):
        return value.tolist()
    if isinstance(value, np.ndarray):
        return list(value.ravel(order="F"))
    if isinstance(value, tuple):
        return list(value)
    raise FormatError(f"expected an array, found {type(value).__name__}")


def pairs_to_dict(julia_type: JuliaType) -> Callable[[Any, TreePath], Any]:
    """Converter for Dicts: written as ``SerializedDict(kvvec)`` or as a vector of Pairs.

    Keys Python cannot hash (arrays, NamedTuples), or keys distinct in Julia but equal in Python
    (``:a`` and ``"a"``, ``1`` and ``1.0``), keep the Julia form:
    ``JuliaStruct(julia_type, {"kvvec": <the pairs>})``, so no entry is lost.
    """

    def convert(value: Any, path: TreePath) -> Any:
        if isinstance(value, JuliaStruct) and "kvvec" in value.fields:
            value = value.fields["kvvec"]
        pairs = elements_of(value)
        out: JuliaDict = JuliaDict()
        out.julia_type = julia_type
        for p in pairs:
            if isinstance(p, JuliaStruct) and "first" in p.fields and "second" in p.fields:
                key, val = p.fields["first"], p.fields["second"]
            elif isinstance(p, NamedTuple) and "first" in p and "second" in p:
                key, val = p["first"], p["second"]
            else:
                raise FormatError(f"Dict entry is not a Pair: {type(p).__name__}", path=path)
            try:
                if key in out:
                    break
                out[key] = val
            except TypeError:
                break
        else:
            return out
        kvvec = value if isinstance(value, (list, JuliaArray)) else JuliaArray("Core.Pair", pairs)
        return JuliaStruct(julia_type, {"kvvec": kvvec})

    return convert


def vector_to_tuple(value: Any, path: TreePath) -> Any:
    """Converter for ``NTuple{N,T}`` with N > 10, which JLD2 writes as ``Vector{T}``."""
    return tuple(elements_of(value))


def base62_to_int(value: Any, path: TreePath, *, max_digits: int, julia_name: str = BIGINT_NAME) -> Any:
    """Converter for ``BigInt``, which JLD2 writes as its base-62 string (bind ``max_digits``,
    ``Limits.max_bigint_digits``: by default every value read fits Python's int <-> decimal text
    limit, so ``inspect``, JSON and schemas can print it; a bigger one is a LimitError here
    rather than a failure later). The value is a :class:`BigInt` keeping ``julia_name``, the
    name the file gave the type, so it is written back under that name.

    Example:
        >>> base62_to_int("-1z", (), max_digits=2399)
        BigInt(-123)
    """
    text = str(value)
    digits = BASE62_DIGITS
    neg = text.startswith("-")
    body = text[1:] if neg else text
    if not body:
        raise FormatError("malformed BigInt text ''", path=path)
    if len(body) > max_digits:
        raise LimitError(
            f"BigInt of {len(body)} base-62 digits exceeds max_bigint_digits={max_digits} (by default "
            "about 4300 decimal digits, Python's int/text conversion limit)",
            path=path,
        )
    n = 0
    for ch in body:
        d = digits.find(ch)
        if d < 0:
            raise FormatError(f"malformed BigInt text {text[:40]!r}", path=path)
        n = n * 62 + d
    return BigInt(-n if neg else n, julia_name)


def text_to_bigfloat(value: Any, path: TreePath, *, julia_name: str = BIGFLOAT_NAME) -> Any:
    """Converter for ``BigFloat``, which JLD2 writes as its decimal ``String`` (``string(x)``):
    a :class:`BigFloat` keeping the text and ``julia_name``, the name the file gave the type, so
    both are written back as they were.

    Example:
        >>> text_to_bigfloat("-1.25e+400", ())
        BigFloat('-1.25e+400')
    """
    try:
        return BigFloat(str(value), julia_name)
    except ValueError:
        raise FormatError(f"malformed BigFloat text {str(value)[:40]!r}", path=path) from None


def wrap_custom(julia_type: JuliaType, layout: StructLayout | None) -> Callable[[Any, TreePath], Any]:
    """Converter for other custom serializations: the written struct's fields under the read-as
    type (``layout.written_type`` names the written type)."""

    def convert(value: Any, path: TreePath) -> Any:
        if isinstance(value, JuliaStruct):
            return JuliaStruct(julia_type, value.fields, layout=layout or value.layout)
        if isinstance(value, NamedTuple):
            return JuliaStruct(julia_type, dict(value.items()), layout=layout)
        return JuliaStruct(julia_type, {"written": value}, layout=layout)

    return convert
