"""Committed datatypes (``/_types``) and Julia type reconstruction: from HDF5 types to plans.

For every datatype the reader meets it builds a :class:`~._plans.Plan` once:

* *Committed* datatypes (shared datatype messages pointing into ``/_types``) carry attributes:
  ``julia_type`` (a ``Core.DataType`` value: name + parameter references), maybe
  ``written_type`` (custom serialization), ``empty`` (ghost type), ``field_names`` +
  ``field_types`` (format 0.2.0) or ``field_datatypes`` (format 0.1.x). They are cached by
  address, so a 20,000-leaf model with a handful of layer types decodes each type once.
* Uncommitted datatypes map to Julia types the way JLD2 maps them (numbers, ``Bool``,
  ``String``, references to ``Any``, plain compounds to ``NamedTuple``).

Type parameters are references to (1) committed datatypes, whose ``julia_type`` is the
parameter, (2) unlinked ``Core.DataType`` datasets, decoded to a :class:`JuliaType`, or (3)
unlinked datasets holding values (``Int64`` ``N``, ``Bool``, a tuple of Symbols for NamedTuple
names, ``Union``/``UnionAll``/``TypeVar`` values...). Values keep their exact value-model type
(an ``Int32`` parameter written by 32-bit Julia stays ``numpy.int32``). Cycles through
parameters raise :class:`FormatError`; nesting deeper than ``Limits.max_depth`` raises
:class:`LimitError`.

Ghost fields (zero-size, no compound member) are listed in ``field_names`` in format 0.2.0. Format
0.1.x files do not list them, so for ``Tuple`` and ``NamedTuple`` types the full field list is
taken from the type parameters (a Flux ``σ = ()`` or a stateless layer shows up as a missing
member). For other structs of format 0.1.x files, ghost fields cannot be recovered without the
Julia definition of the type; those structs contain their stored fields only.
"""

from __future__ import annotations

import dataclasses
import struct
import weakref
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from .._errors import FormatError, LimitError, TreePath, TreexchangeError, UnsupportedError
from .._hdf5._messages import DATATYPE, LAYOUT, MSG_FLAG_SHARED
from .._hdf5._model import Attribute, H5Class, H5Type, Member
from .._juliatype import JuliaType, is_bigfloat_name, is_bigint_name
from .._limits import type_depth
from .._values import Symbol
from ._layout import StructLayout
from ._plans import (
    BFloat16Plan,
    BitsPlan,
    BoolPlan,
    CompoundPlan,
    CustomPlan,
    DataTypePlan,
    FieldPlan,
    FixedStringPlan,
    GhostPlan,
    Int128Plan,
    LegacyUnionTypePlan,
    NumberPlan,
    Plan,
    ReferencePlan,
    UnionElementPlan,
    UnionTypePlan,
    VlenSequencePlan,
    VlenStringPlan,
    base62_to_int,
    decode_text,
    pairs_to_dict,
    text_to_bigfloat,
    type_of_value,
    vector_to_tuple,
    wrap_custom,
)
from ._typeutil import (
    ANY,
    basic_julia_type,
    ghost_value,
    is_namedtuple_type,
    is_tuple_type,
    namedtuple_names_types,
    tuple_element_types,
)

if TYPE_CHECKING:
    from ._plans import DecodeContext
    from ._reader import DatasetInfo, Reader

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_U16 = struct.Struct("<H")
_REF_LISTS = tuple(struct.Struct(f"<{n}Q") for n in range(17))  # (TypeResolver._refs)

# Julia primitive types JLD2 may store under a committed datatype: name -> (numpy kind, size).
_PRIMITIVES: dict[str, tuple[str, int]] = {
    **{f"Core.Int{8 * n}": ("i", n) for n in (1, 2, 4, 8)},
    **{f"Core.UInt{8 * n}": ("u", n) for n in (1, 2, 4, 8)},
    "Core.Float16": ("f", 2),
    "Core.Float32": ("f", 4),
    "Core.Float64": ("f", 8),
    "Core.Bool": ("b", 1),
}
_WIDE_INTS = frozenset({"Core.Int128", "Core.UInt128"})
_DESCRIPTIONS_KEPT = 4096  # Union descriptions remembered per file (TypeResolver.union_descriptions)
_DICT_NAMES = frozenset({"Dict", "IdDict", "ImmutableDict", "OrderedDict"})


def _is_vlen_string(t: H5Type) -> bool:
    return t.cls == H5Class.VLEN and t.is_vlen_string


def _is_vlen_refs(t: H5Type) -> bool:
    return (
        t.cls == H5Class.VLEN
        and not t.is_vlen_string
        and t.base is not None
        and t.base.cls == H5Class.REFERENCE
    )


def is_datatype_compound(t: H5Type) -> bool:
    """Whether ``t`` has the shape of JLD2's ``Core.DataType`` compound (name + parameters)."""
    return (
        t.cls == H5Class.COMPOUND
        and len(t.members) == 2
        and t.members[0].name == "name"
        and t.members[1].name == "parameters"
        and _is_vlen_string(t.members[0].type)
        and _is_vlen_refs(t.members[1].type)
        and t.members[0].offset == 0
        and t.members[1].offset == 16
        and t.size >= 32
    )


def _is_union_compound(t: H5Type) -> bool:
    names = [m.name for m in t.members]
    return (
        t.cls == H5Class.COMPOUND
        and names == ["description", "datatype", "unionall"]
        and _is_vlen_string(t.members[0].type)
        and _is_vlen_refs(t.members[1].type)
        and _is_vlen_refs(t.members[2].type)
        and [m.offset for m in t.members] == [0, 16, 32]
        and t.size >= 48
    )


def _check_members(t: H5Type) -> None:
    seen: set[str] = set()
    for m in t.members:
        if m.offset < 0 or m.offset + m.type.size > t.size:
            raise FormatError(
                f"compound member {m.name!r} (offset {m.offset}, size {m.type.size}) "
                f"lies outside its compound of size {t.size}"
            )
        if m.name in seen:
            raise FormatError(f"compound has two members named {m.name!r}")
        seen.add(m.name)


_NEVER_GHOSTS = frozenset(
    {
        *_PRIMITIVES,
        "Core.Int128",
        "Core.UInt128",
        "Core.Char",
        "Core.String",
        "Core.Symbol",
        "Core.Any",
        "Core.Array",
        "Core.Memory",
        "Core.GenericMemory",
        "Core.DataType",
        "Core.Union",
        "Base.Complex",
        "Base.Dict",
    }
)


def _symbols_tuple(plan: CompoundPlan) -> bool:
    """Whether ``plan`` is a ``Tuple`` of Symbols stored inline (a NamedTuple's names): what the
    type session would read as that tuple, with nothing to remember (no string, struct or
    TypeVar), so :meth:`TypeResolver._scalar_param` decodes it straight from its bytes."""
    return plan.kind == "tuple" and all(
        f.storage == "inline" and type(f.plan) is VlenStringPlan and f.plan.symbol  # type: ignore[attr-defined]
        for f in plan.fields
    )


def _same_concrete(params: tuple[Any, ...]) -> bool:
    """Whether tuple parameters are one type, and not one that is plainly abstract (``Any``, a
    ``Union``, a ``where`` type): the tuples JLD2 >= v0.4.19 names ``NTuple`` (or ``Tuple``)."""
    first = params[0]
    if not isinstance(first, JuliaType) or first.name in ("Core.Any", "Core.Union", "Core.UnionAll"):
        return False
    # (equal ones are mostly one object; a parameter of a damaged file may be any value, an array
    # too, whose == is no bool: only types are compared)
    return all(p is first or (isinstance(p, JuliaType) and p == first) for p in params)


def _is_int(value: Any, n: int) -> bool:
    """Whether a type parameter is the integer ``n`` (an ``Int64`` or ``Int32`` value; a damaged
    file's parameter may be any value, an array too, whose ``==`` is no bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value == n


def _part_key(p: Any) -> Any:
    """A type parameter's part of a key in ``TypeResolver._intern_parts``: a type's identity
    (an int), an ``Int64``'s value in a tuple (never equal to an int)."""
    return id(p) if type(p) is JuliaType else ("Int64", int(p))


def _may_be_ghost(t: JuliaType) -> bool:
    """False for types that always store bytes (numbers, strings, arrays...); True otherwise
    (``Tuple{}``, ``Nothing``, function types, empty structs are ghosts; unknown structs may be)."""
    if t.name in _NEVER_GHOSTS or t.basename == "BFloat16":
        return False
    if is_tuple_type(t):
        elems = t.params[1:2] if t.basename == "NTuple" else t.params
        try:
            return all(isinstance(e, JuliaType) and _may_be_ghost(e) for e in elems)
        except RecursionError:  # pragma: no cover - absurdly deep type
            return False
    return True


def _known_fields(jt: JuliaType) -> list[tuple[str, Any]] | None:
    """Field lists of the few non-tuple structs whose definition we know (for ghost fields of
    format 0.1.x files, which do not list them): ``Pair``, ``InlineUnionEl``."""
    if jt.basename == "Pair" and jt.name in ("Core.Pair", "Base.Pair") and len(jt.params) == 2:
        return [("first", jt.params[0]), ("second", jt.params[1])]
    if jt.name == "JLD2.InlineUnionEl" and len(jt.params) == 2:
        return [("mask", JuliaType("Core.UInt8")), ("t1", jt.params[0]), ("t2", jt.params[1])]
    return None


# Compound types whose plan gives a Julia type other than the julia_type attribute's, or notes
# a trait of the writer: planned when met as a type parameter (TypeResolver._committed_param).
_EAGER_COMPOUNDS = frozenset({"JLD2.InlineUnionEl", "Core.DataType", "Core.Union"})

_T = TypeVar("_T")
_NOT_READ: Any = object()  # (a parameter's value may be None)

# Parameters a type is found by in TypeResolver._intern_parts (types by identity, Int64 by value),
# at most _PARTS_MAX of them (a longer tuple hashes each distinct object once, JuliaType.__hash__).
_PLAIN_PARAMS = frozenset({JuliaType, np.int64})
_TYPE_PARAMS = frozenset({JuliaType})
_PARTS_MAX = 16
_FORMS_KEPT = 64  # scalar parameter datasets' header forms remembered (TypeResolver._scalar_forms)
_PARTS_KEPT = 65536  # types remembered by their parts per file (each is one DataType value read)
_BY_ID_ENTRIES = 4096  # datatype objects remembered by identity (a file has a handful)
_TEXTS_KEPT = 4096  # field types' texts remembered (TypeResolver._text), each of at most
_TEXT_CHARS = 1024  # characters


class TypeResolver:
    """Builds and caches plans for the datatypes of one file."""

    def __init__(self, reader: Reader) -> None:
        # A proxy, not the reader itself: the reader holds its resolver, and a cycle between
        # them would keep a File dropped unclosed (its memory map, the recursion limit it
        # raised) alive until the garbage collector finds it, rather than freed at once.
        self.reader: Reader = weakref.proxy(reader)
        self.h5 = reader.h5
        self.limits = reader.type_limits
        self._committed: dict[int, Plan] = {}
        self._basic: dict[tuple[H5Type, JuliaType | None], Plan] = {}
        self._by_id: dict[int, tuple[H5Type, Plan]] = {}
        self._params: dict[int, Any] = {}
        self._committed_params: set[int] = set()  # the keys of _params that are committed types
        # Types the file writes as parameters by name (a DataType dataset), not committed.
        self.by_name_params: set[JuliaType] = set()
        # One object per distinct decoded type. A file may hold the same type as many DataType
        # datasets (JLD2 writes the parameters of each committed type afresh: a Dict nested n deep
        # has n copies of its inner levels); equal types then share their parameters' objects,
        # so comparing two (a set or dict lookup) stops at the first level, not at the bottom.
        self._interned: dict[JuliaType, JuliaType] = {}
        self._by_parts: dict[tuple[Any, ...], tuple[tuple[Any, ...], JuliaType]] = {}  # _intern_parts
        # What the types read so far show of the JLD2 version that wrote them: rules that
        # changed between JLD2 releases (treexchange._jld2._era names them).
        self.writer_traits: set[str] = set()
        self.committed_types: dict[int, JuliaType] = {}
        """The Julia type (``julia_type``) of each committed datatype resolved, by address: a type
        committed twice tells a later write session that did not reuse it (``_sessions``)."""
        # The description of each Core.Union read, by the union's qualified text (_era.Source).
        self.union_descriptions: dict[str, str] = {}
        self._busy: set[int] = set()
        self._depth = 0
        self._max_depth = type_depth(self.limits)  # (_enter: once per type parameter)
        # Described scalar Core.DataType and number datasets with compact data, by identity:
        # (header, its layout body's place relative to the header, the layout's size, the bytes
        # its data need, the element's size) -- see _compact_element
        self._scalar_forms: dict[int, tuple[Any, int, int, int, int]] = {}
        self._datatype_compound: H5Type | None = None  # the last type is_datatype_compound accepted
        self._texts: dict[int, tuple[Any, str]] = {}  # id -> (object, repr) (see _text)

    # --- entry points -------------------------------------------------------------------------
    def plan_for(self, t: H5Type, declared: JuliaType | None = None) -> Plan:
        """The plan for a datatype as found in a dataset, attribute or compound member."""
        if t.committed_at is not None:
            return self.committed(t.committed_at)
        if declared is None:
            # Datatypes of datasets are decoded once per distinct message body, so the same
            # object recurs (every Float32 array): look it up by identity before hashing it
            # (a frozen dataclass hashes every field). The entry keeps t alive: ids stay unique.
            hit = self._by_id.get(id(t))
            if hit is not None and hit[0] is t:
                return hit[1]
        key = (t, declared)
        plan = self._basic.get(key)
        if plan is None:
            plan = self._basic_plan(t, declared)
            self._basic[key] = plan
        if declared is None and len(self._by_id) < _BY_ID_ENTRIES:
            self._by_id[id(t)] = (t, plan)
        return plan

    def committed(self, address: int) -> Plan:
        """The plan for the committed datatype whose object header is at ``address``."""
        plan = self._committed.get(address)
        if plan is not None:
            return plan
        plan = self._guarded(address, self._build_committed)
        self._committed[address] = plan
        return plan

    def _guarded(self, address: int, build: Callable[[int], _T]) -> _T:
        """``build(address)`` for the committed datatype at ``address``, guarded against one
        that refers to itself and against nesting too deep; errors say where it lies."""
        if address in self._busy:
            raise FormatError(
                "committed datatype refers to itself through its type parameters or fields",
                offset=self.h5.absolute(address),
            )
        self._enter()
        self._busy.add(address)
        try:
            return build(address)
        except TreexchangeError as err:
            err.with_context(offset=self.h5.absolute(address))
            raise
        finally:
            self._busy.discard(address)
            self._depth -= 1

    def is_committed_datatype(self, address: int) -> bool:
        """Whether ``address`` holds a committed datatype (as opposed to a dataset)."""
        return self.reader.object_kind(address) == "datatype"

    # --- DataType values ------------------------------------------------------------------------
    def decode_datatype(self, buf: Any, off: int, path: TreePath) -> JuliaType:
        """Decode a ``Core.DataType`` element (32 bytes: name vlen string, parameters vlen refs)."""
        name = decode_text(self.h5.vlen_at(buf, off))
        if len(name) > self.limits.max_name_bytes:
            raise LimitError(f"type name longer than max_name_bytes={self.limits.max_name_bytes}", path=path)
        if not name:
            raise FormatError("Julia type with an empty name", path=path)
        refs = self._refs(buf, off + 16, path)
        # Each distinct parameter decoded once, in order of first use (a long Tuple's type
        # repeats one layer type thousands of times), then spread over the positions in C.
        n = len(refs)
        repeated = n > 1 and refs.count(refs[0]) == n
        distinct: Any
        if not refs:
            params: tuple[Any, ...] = ()
            distinct = ()
        elif repeated or n == 1:  # one type throughout (a long tuple of one layer type): no dict
            first = self._param(refs[0], path)
            params = (first,) * n
            distinct = ((refs[0], first),)
        else:
            found = dict.fromkeys(refs)
            for ref in found:
                found[ref] = self._param(ref, path)
            params = tuple(map(found.__getitem__, refs))
            distinct = found.items()
        for ref, param in distinct:
            # (whether ref is a committed type: _param found out, every ref here went through it)
            if isinstance(param, JuliaType) and ref not in self._committed_params:
                # JLD2 (refs_from_types) commits a concrete struct type used as a parameter
                # exactly when it stores such structs inline (bits, or immutable of at most
                # MAX_INLINE_SIZE bytes); one it writes by name instead is mutable (or larger).
                self.by_name_params.add(param)
        if name in ("Base.Pair", "Core.Pair"):
            self.writer_traits.add("name:" + name)  # Julia < 1.7 defined Pair in Base
        if len(params) == 1 and name == "Tuple":
            self.writer_traits.add("tuple1:Tuple")  # JLD2 >= v0.4.41 names a 1-tuple Tuple{T}
        elif name == "NTuple":
            self.writer_traits.add("tuple:NTuple")  # JLD2 >= v0.4.19 names homogeneous tuples
            if len(params) == 2 and _is_int(params[0], 1):
                self.writer_traits.add("tuple1:NTuple")  # JLD2 < v0.4.41: NTuple{1,T}
        elif name == "Core.Tuple" and params and _same_concrete(params[:1] if repeated else params):
            self.writer_traits.add("tuple:Core.Tuple")  # JLD2 < v0.4.19: no NTuple naming
        return self._intern_parts(name, params, repeated)

    def decode_union(self, buf: Any, off: int, path: TreePath) -> JuliaType:
        """Decode a ``Core.Union`` element: ``Union{datatypes..., unionalls...}``."""
        members = [self._param(ref, path) for ref in self._refs(buf, off + 16, path)]
        members += [self._param(ref, path) for ref in self._refs(buf, off + 32, path)]
        union = self._intern(JuliaType("Core.Union", tuple(members)))
        if len(self.union_descriptions) < _DESCRIPTIONS_KEPT:
            text = decode_text(self.reader.heap_bytes(buf, off))
            self.union_descriptions.setdefault(union.qualified(), text[: self.limits.max_name_bytes])
        return union

    def _intern(self, t: JuliaType) -> JuliaType:
        return self._interned.setdefault(t, t)

    def _intern_parts(self, name: str, params: tuple[Any, ...], repeated: bool) -> JuliaType:
        """``_intern(JuliaType(name, params))``, found by its parts when they are types or
        ``Int64`` values (``Array{Float32,1}``, ``Dict{String,...}``): a lookup of the name with
        each type's identity (a file's parameter types are interned, so equal ones are mostly
        one object) and each Int64's value, where building the type and hashing it costs several
        Python calls per parameter, and comparing it with an equal-hashed type may go deep. The
        entry keeps ``params`` alive, so the identities stay unique; same parts, same type."""
        key: tuple[Any, ...] | None = None
        if repeated:
            if type(params[0]) in _PLAIN_PARAMS:
                key = (name, _part_key(params[0]), len(params))
        elif len(params) <= _PARTS_MAX:
            kinds = set(map(type, params))
            if kinds <= _TYPE_PARAMS:
                key = (name, tuple(map(id, params)))
            elif kinds <= _PLAIN_PARAMS:
                key = (name, tuple(map(_part_key, params)))
        if key is not None:
            found = self._by_parts.get(key)
            if found is not None:
                return found[1]
        made = JuliaType._repeated(name, params[0], len(params)) if repeated else JuliaType(name, params)
        t = self._intern(made)
        if key is not None and len(self._by_parts) < _PARTS_KEPT:
            self._by_parts[key] = (params, t)
        return t

    def _refs(self, buf: Any, off: int, path: TreePath) -> list[int]:
        count = _U32.unpack_from(buf, off)[0]
        if count == 0:
            return []
        payload = self.h5.vlen_at(buf, off)  # (Reader.heap_bytes, one call less)
        if count * 8 > len(payload):
            raise FormatError(f"{count} type parameters do not fit their heap object", path=path)
        if count < len(_REF_LISTS):  # (the usual few: unpacked at once, then compared)
            refs = list(_REF_LISTS[count].unpack_from(payload))
            return [refs[0]] * count if refs.count(refs[0]) == count else refs
        first = payload[:8]
        if bytes(first) * count == bytes(payload[: 8 * count]):  # one reference throughout
            return [_U64.unpack_from(first)[0]] * count
        return list(struct.unpack_from(f"<{count}Q", payload))

    def _param(self, ref: int, path: TreePath) -> Any:
        value: Any = self._params.get(ref, _NOT_READ)
        if value is not _NOT_READ:
            return value
        if ref == 0:
            raise FormatError("type parameter is a NULL reference", path=path)
        # (what is_committed_datatype asks; the header then describes a dataset, _scalar_param)
        header: DatasetInfo = self.h5.alike_of(ref)  # type: ignore[assignment]
        if header.kind == "datatype":
            value = self._committed_param(ref, path)
            self._committed_params.add(ref)
        else:
            if ref in self._busy:
                raise FormatError("type parameter refers back to the type being read", path=path)
            self._enter()
            self._busy.add(ref)
            try:
                value = self._scalar_param(ref, path, header)
                if value is None:
                    value = type_of_value(self.reader.load_type_param(ref, path))
            finally:
                self._busy.discard(ref)
                self._depth -= 1
        self._params[ref] = value
        return value

    def _committed_param(self, address: int, path: TreePath) -> JuliaType:
        """The Julia type of the committed datatype at ``address``, used as a type parameter.

        Only its ``julia_type`` attribute is decoded when it is a plain struct, Tuple or
        NamedTuple (a compound with no ``written_type``): its plan (the HDF5 compound parsed,
        every field planned) waits until a dataset of that type is met (:meth:`committed`). A
        file's types name one another as parameters (a Flux state's NamedTuple names each layer's
        NamedTuple type), and a walk over metadata visits a few of them. Anything else is planned
        at once, as before: its plan may note a trait of the writer or say what its Julia type is.
        """
        plan = self._committed.get(address)
        if plan is not None:
            return plan.julia_type
        known = self.committed_types.get(address)
        if known is not None:
            return known
        obj = self.h5.object(address)
        msg = obj._first(DATATYPE)
        attrs = obj.attributes
        jt_attr = attrs.get("julia_type") or attrs.get("julia type")
        if (
            msg is None
            or msg[1] & MSG_FLAG_SHARED
            or msg[3] < 1
            or self.h5.buffer[msg[2]] & 0x0F != H5Class.COMPOUND
            or jt_attr is None
            or jt_attr.type.committed_at == address
            or "written_type" in attrs
            or "empty" in attrs
        ):
            return self.committed(address).julia_type
        jt = self._guarded(address, lambda _: self.type_attribute(jt_attr, path))
        if jt.name in _EAGER_COMPOUNDS or jt.basename == "Complex":
            return self.committed(address).julia_type  # their plans name another type
        self.committed_types[address] = jt
        return jt

    def _scalar_param(self, ref: int, path: TreePath, header: DatasetInfo) -> Any:
        """The value of the scalar dataset at ``ref`` when it is a ``Core.DataType`` (how JLD2
        writes most type parameters: ``Float32``, ``String``, an inner ``Dict{...}``), a number
        (``N`` of ``Array{T,N}``) or a tuple of Symbols (a NamedTuple's names), decoded straight
        from its bytes; None for any other dataset (read as a value in the type session,
        :meth:`_param`).

        What the session's read of that dataset gives (``type_of_value`` of it), without the
        session's per-value work: neither holds a TypeVar, string or struct to remember.
        """
        reader = self.reader
        form = self._scalar_forms.get(id(header))
        if form is not None and form[0] is header and header.address != ref:
            raw = self._compact_element(ref, form)
            if raw is not None:
                try:
                    if type(header.plan) is DataTypePlan:
                        return self.decode_datatype(raw, 0, path)
                    return header.plan.decode(cast("DecodeContext", None), raw, 0, path)
                except TreexchangeError as err:
                    err.with_context(offset=self.h5.absolute(ref), path=path)
                    raise
        # described by a header alike to it when there is one (no header object per parameter);
        # ``header``: the one alike_of gave, which describe would give again once described
        info = header if header.value_kind is not None else reader.describe(ref, path)
        plan = info.plan
        kind = type(plan)
        # a NamedTuple's names: its fields, each a Symbol, read as text
        symbols = (
            kind is CompoundPlan
            and info.kind == "dataset"
            and info.space == "scalar"
            and _symbols_tuple(cast(CompoundPlan, plan))
        )
        if not symbols and (
            (kind is not DataTypePlan and kind is not NumberPlan)
            or info.kind != "dataset"
            or info.shape is not None
        ):
            return None
        assert plan is not None
        try:
            raw = reader.element_bytes_at(info, ref, path)
            if info is header and not symbols and id(info) not in self._scalar_forms:
                self._note_scalar_form(info)
            if kind is DataTypePlan:
                return self.decode_datatype(raw, 0, path)
            if symbols:
                fields = cast(CompoundPlan, plan).fields
                return tuple(Symbol(decode_text(reader.heap_bytes(raw, f.offset))) for f in fields)
            return plan.decode(cast("DecodeContext", None), raw, 0, path)  # (numbers use no context)
        except TreexchangeError as err:
            err.with_context(offset=self.h5.absolute(ref), path=path)
            raise

    def _note_scalar_form(self, info: DatasetInfo) -> None:
        """Remember ``info`` (a scalar ``Core.DataType`` or number dataset, described) for
        :meth:`_compact_element` when its data are compact, as JLD2 writes type parameters."""
        h5 = self.h5
        layout = info._first(LAYOUT)
        space = info.dataspace
        assert info.plan is not None
        # (a scalar dataspace: the element is the datatype's size, _element_size in _reader)
        if layout is None or not h5._wide or space is None or space.kind != "scalar":
            return
        at, size = layout[2], layout[3]
        buf = h5.buffer
        if size < 4 or not 3 <= buf[at] <= 5 or buf[at + 1] != 0 or len(self._scalar_forms) >= _FORMS_KEPT:
            return
        nbytes = h5._expected_bytes(info)
        if nbytes < info.plan.size:
            return
        self._scalar_forms[id(info)] = (info, at - info.offset, size, nbytes, info.plan.size)

    def _compact_element(self, address: int, form: tuple[Any, int, int, int, int]) -> bytes | None:
        """The element of the scalar dataset at ``address``, whose header is alike
        (:meth:`HDF5File.alike_of`) to the one ``form`` has (:meth:`_note_scalar_form`), when its
        data are compact and whole: what ``Reader.element_bytes_at`` reads from that layout,
        with the same checks, in one place (a file's type parameters are mostly such datasets).
        None otherwise, and for a closed file: the usual way then reads them or says what is
        wrong."""
        reader = self.reader
        if reader.closed:
            return None
        h5 = self.h5
        _, rel, size, nbytes, element = form
        at = address + h5.base + rel  # the layout body: the one part alike headers do not share
        buf = h5.buffer
        if not 3 <= buf[at] <= 5 or buf[at + 1] != 0:
            return None
        (stored,) = _U16.unpack_from(buf, at + 2)
        if not nbytes <= stored <= size - 4 or at + 4 + nbytes > h5.size:
            return None
        return bytes(buf[at + 4 : at + 4 + element])

    def _enter(self) -> None:
        self._depth += 1
        if self._depth > self._max_depth:
            self._depth -= 1
            raise LimitError(
                f"types nested deeper than {type_depth(self.limits)} levels "
                f"(2 * max_depth={self.limits.max_depth} + 16)"
            )

    def type_attribute(self, attr: Attribute, path: TreePath = ()) -> JuliaType:
        """Decode a ``julia_type``/``written_type`` attribute of a committed datatype."""
        t = attr.type
        if t is not self._datatype_compound and is_datatype_compound(t):
            self._datatype_compound = t  # (every such attribute has the file's one DataType type)
        if t is not self._datatype_compound or attr.space.kind != "scalar":
            raise FormatError(
                f"attribute {attr.name!r} is not a scalar Core.DataType", offset=attr.data_offset
            )
        if len(attr.data) < 32:
            raise FormatError(f"attribute {attr.name!r} is truncated", offset=attr.data_offset)
        return self.decode_datatype(attr.data, 0, path)

    # --- committed datatypes ------------------------------------------------------------------
    def _build_committed(self, address: int) -> Plan:
        obj = self.h5.object(address)
        if self.reader.object_kind(address) != "datatype" or obj.datatype is None:
            raise FormatError("reference to a committed datatype points to something else")
        dt = obj.datatype.committed_as(address)
        attrs = obj.attributes
        jt_attr = attrs.get("julia_type") or attrs.get("julia type")
        if jt_attr is None:
            return self._basic_plan(dt, None)
        if jt_attr.type.committed_at == address:
            # The bootstrap type: the datatype of julia_type attributes is itself.
            if not is_datatype_compound(dt):
                raise FormatError("the Core.DataType type does not have JLD2's layout")
            return DataTypePlan(JuliaType("Core.DataType"), dt)
        jt = self.committed_types.get(address) or self.type_attribute(jt_attr)  # (_committed_param)
        self.committed_types[address] = jt
        wt_attr = attrs.get("written_type")
        wt = self.type_attribute(wt_attr) if wt_attr is not None else None
        if "empty" in attrs:
            return GhostPlan(ghost_value(jt, self.limits), jt, dt)
        if wt is not None:
            inner = self._structural(dt, wt, attrs)
            return self._custom(jt, wt, inner)
        return self._structural(dt, jt, attrs)

    def _custom(self, jt: JuliaType, wt: JuliaType, inner: Plan) -> Plan:
        if jt.basename in _DICT_NAMES:
            # JLD2 < v0.4.42 wrote a Dict as its Vector{Pair}; later ones as a JLD2.SerializedDict.
            vector = wt.basename in ("Array", "Vector")
            self.writer_traits.add("dict:Vector" if vector else f"dict:{wt.basename}")
            return CustomPlan("dict", jt, inner, pairs_to_dict(jt))
        if is_tuple_type(jt) and wt.basename in ("Array", "Vector", "Memory"):
            return CustomPlan("tuple", jt, inner, vector_to_tuple)
        if is_bigint_name(jt.name) and not jt.params and isinstance(inner, (VlenStringPlan, FixedStringPlan)):
            # Julia's BigInt under whichever name the file gives it (JLD2 writes Base.GMP.BigInt).
            limit = self.limits.max_bigint_digits
            return CustomPlan(
                "number", jt, inner, partial(base62_to_int, max_digits=limit, julia_name=jt.name)
            )
        if (
            is_bigfloat_name(jt.name)
            and not jt.params
            and isinstance(inner, (VlenStringPlan, FixedStringPlan))
        ):
            # Julia's BigFloat (JLD2's writeas(BigFloat) = String: its decimal text)
            return CustomPlan("number", jt, inner, partial(text_to_bigfloat, julia_name=jt.name))
        layout = None
        if isinstance(inner, CompoundPlan) and inner.layout is not None:
            layout = dataclasses.replace(inner.layout, julia_type=jt, written_type=wt)
        elif isinstance(inner, VlenStringPlan) and not inner.symbol and inner.h5type is not None:
            # Written as a String (a user type's writeas, as JLD2's writeas(BigInt) = String): the
            # value reads as its one "written" field; the layout keeps written_type for the writer.
            layout = StructLayout(jt, inner.h5type, (), written_type=wt)
        return CustomPlan("struct", jt, inner, wrap_custom(jt, layout))

    def _structural(self, dt: H5Type, jt: JuliaType, attrs: dict[str, Attribute]) -> Plan:
        """Plan for data of HDF5 type ``dt`` that Julia reads as ``jt``."""
        cls = dt.cls
        name = jt.name
        if cls == H5Class.COMPOUND:
            _check_members(dt)
            if name == "Core.DataType" and is_datatype_compound(dt):
                return DataTypePlan(jt, dt)
            if name == "Core.Union" and _is_union_compound(dt):
                return UnionTypePlan(jt, dt)
            if jt.basename == "Complex":
                plan = self._complex(dt, jt)
                if plan is not None:
                    return plan
            if name == "JLD2.InlineUnionEl":
                inner = self._compound(dt, jt, attrs, "struct", _known_fields(jt))
                return UnionElementPlan(inner, JuliaType("Core.Union", jt.params))
            if is_tuple_type(jt):
                elems = tuple_element_types(jt, self.limits)
                expected = [(str(i + 1), t) for i, t in enumerate(elems)]
                return self._compound(dt, jt, attrs, "tuple", expected)
            if is_namedtuple_type(jt):
                parsed = namedtuple_names_types(jt, self.limits)
                named: list[tuple[str, Any]] | None = list(zip(*parsed)) if parsed is not None else None
                return self._compound(dt, jt, attrs, "namedtuple", named)
            return self._compound(dt, jt, attrs, "struct", _known_fields(jt))
        if cls == H5Class.VLEN and dt.is_vlen_string:
            return VlenStringPlan(name == "Core.Symbol", jt, dt)
        if (
            cls == H5Class.VLEN
            and name == "Core.Union"
            and dt.base is not None
            and is_datatype_compound(dt.base)
        ):
            return LegacyUnionTypePlan(jt, dt)  # JLD2 <= v0.1.x: a vlen of the member DataTypes
        prim = _PRIMITIVES.get(name)
        if (
            prim is not None
            and prim[1] == dt.size
            and cls
            in (
                H5Class.FIXED,
                H5Class.FLOAT,
                H5Class.BITFIELD,
                H5Class.OPAQUE,
            )
        ):
            kind, size = prim
            if kind == "b":
                # a committed Bool: opaque before JLD2 v0.3.3 (_era), a bitfield otherwise
                self.writer_traits.add("bool:opaque" if cls == H5Class.OPAQUE else "bool:bitfield")
                return BoolPlan(jt, dt)
            order = dt.byte_order if cls != H5Class.OPAQUE else "<"
            return NumberPlan(np.dtype(f"{order}{kind}{size}"), jt, dt)
        if cls == H5Class.OPAQUE:
            if jt.basename == "BFloat16" and dt.size == 2:
                return BFloat16Plan(jt, dt)
            return BitsPlan(jt, dt.size, dt)
        if cls == H5Class.REFERENCE:
            return ReferencePlan(jt, dt)
        return self._stored_as_other(dt, jt)

    def _stored_as_other(self, dt: H5Type, jt: JuliaType) -> Plan:
        """A committed type whose HDF5 class is not the one JLD2 gives ``jt`` (above): accept it
        when the bytes read as ``jt`` anyway, never silently as another type."""
        plan = self._basic_plan(dt.committed_as(None), None)
        if plan.julia_type == jt:
            return plan  # e.g. Int128, or String as a fixed-size string
        what = f"{jt.qualified()} stored as an HDF5 {dt.cls.name.lower()} of {dt.size} bytes"
        if jt.name in _PRIMITIVES or jt.name in _WIDE_INTS:
            raise FormatError(f"{what}: the wrong class or size for that type")
        if dt.cls in (H5Class.FIXED, H5Class.FLOAT, H5Class.BITFIELD):
            # A primitive type of the user's (like the opaque ones JLD2 writes): keep its bytes.
            return BitsPlan(jt, dt.size, dt)
        raise UnsupportedError(f"{what} is not supported")

    def _complex(self, dt: H5Type, jt: JuliaType) -> Plan | None:
        members = dt.members
        if len(members) != 2 or [m.name for m in members] != ["re", "im"]:
            return None
        re, im = members[0].type, members[1].type
        if re != im or re.cls != H5Class.FLOAT or re.size not in (4, 8):
            return None  # Complex{Float16}, Complex{Int}: numpy has no such dtype
        if members[0].offset != 0 or members[1].offset != re.size or dt.size != 2 * re.size:
            return None
        base = re.numpy_dtype()
        if base is None:
            return None
        return NumberPlan(
            np.dtype(f"{base.byteorder if base.byteorder != '=' else '<'}c{2 * re.size}"), jt, dt
        )

    # --- struct fields --------------------------------------------------------------------------
    def _compound(
        self,
        dt: H5Type,
        jt: JuliaType | None,
        attrs: dict[str, Attribute],
        kind: str,
        expected: list[tuple[str, Any]] | None,
    ) -> CompoundPlan:
        members = {m.name: m for m in dt.members}
        fn_attr = attrs.get("field_names")
        ft_attr = attrs.get("field_types")
        fd_attr = attrs.get("field_datatypes")
        fields: list[FieldPlan] = []
        field_attrs = "none"
        if fn_attr is not None and ft_attr is not None:
            field_attrs = "field_names"
            names = self._string_list(fn_attr)
            refs = self._ref_list(ft_attr)
            if len(names) != len(refs):
                raise FormatError(
                    f"field_names ({len(names)}) and field_types ({len(refs)}) differ in length",
                    offset=ft_attr.data_offset,
                )
            declared = dict(expected) if expected is not None and len(expected) == len(names) else {}
            for fname, ref in zip(names, refs):
                fields.append(self._field(fname, members.get(fname), ref, declared.get(fname)))
            # Members that no field names are left unread (JLD2 only warns about them).
        else:
            member_refs = [0] * len(dt.members)
            if fd_attr is not None or ft_attr is not None:
                field_attrs = "field_datatypes" if fd_attr is not None else "field_names"
                attr = fd_attr if fd_attr is not None else ft_attr
                assert attr is not None
                member_refs = self._ref_list(attr)
                if len(member_refs) != len(dt.members):
                    raise FormatError(
                        f"{attr.name} has {len(member_refs)} entries for {len(dt.members)} members",
                        offset=attr.data_offset,
                    )
            ref_of = {m.name: r for m, r in zip(dt.members, member_refs)}
            if expected is not None and self._consistent(dt, expected):
                for fname, ftype in expected:
                    fields.append(self._field(fname, members.get(fname), ref_of.get(fname, 0), ftype))
            else:
                for m in dt.members:
                    fields.append(self._field(m.name, m, ref_of[m.name], None))
        if jt is None:
            # A plain HDF5 compound: JLD2 reads it as a NamedTuple of its members.
            names_t = tuple(Symbol(f.name) for f in fields)
            jt = JuliaType(
                "Core.NamedTuple", (names_t, JuliaType("Core.Tuple", [f.plan.julia_type for f in fields]))
            )
        layout = StructLayout(
            julia_type=jt,
            h5type=dt,
            fields=tuple(f.layout() for f in fields),
            field_attrs=field_attrs,  # type: ignore[arg-type]
        )
        return CompoundPlan(kind, jt, dt, fields, layout)

    def _consistent(self, dt: H5Type, expected: list[tuple[str, Any]]) -> bool:
        """Whether the members are a subsequence of the expected fields and every missing field
        can be a ghost (zero-size): its type is not one that always stores data, and no stored
        member has the same declared type (``NTuple{N,T}`` stores all N or none)."""
        names = [n for n, _ in expected]
        if len(set(names)) != len(names):
            return False
        pos = {n: i for i, n in enumerate(names)}
        last = -1
        for m in dt.members:
            i = pos.get(m.name)
            if i is None or i <= last:
                return False
            last = i
        if len(dt.members) == len(names):
            return True  # (a subsequence as long as the whole: every field stored, none missing)
        member_names = {m.name for m in dt.members}
        stored_types = {self._text(t) for n, t in expected if n in member_names}
        for n, t in expected:
            if n in member_names:
                continue
            if not isinstance(t, JuliaType) or not _may_be_ghost(t) or self._text(t) in stored_types:
                raise FormatError(f"field {n!r} of type {t!r} is missing from the stored compound")
        return True

    def _text(self, t: Any) -> str:
        """``repr(t)``, once per object (a Flux layer's field types recur in every layer; the
        entry keeps ``t`` alive, so its id stays unique)."""
        found = self._texts.get(id(t))
        if found is not None and found[0] is t:
            return found[1]
        text = repr(t)
        if len(text) <= _TEXT_CHARS and len(self._texts) < _TEXTS_KEPT:  # (bounded memory)
            self._texts[id(t)] = (t, text)
        return text

    def _field(self, name: str, member: Member | None, ref: int, declared: Any) -> FieldPlan:
        field_type: JuliaType | None = None
        if ref:
            if not self.is_committed_datatype(ref):
                raise FormatError(f"field type of {name!r} does not point to a committed datatype")
            plan = self.committed(ref)
            field_type = plan.julia_type
        else:
            plan = None  # type: ignore[assignment]
        if member is None:
            if plan is None:
                if declared is not None and isinstance(declared, JuliaType):
                    plan = GhostPlan(ghost_value(declared, self.limits), declared, None)
                else:
                    raise FormatError(f"field {name!r} has neither a compound member nor a field type")
            if plan.size != 0 and not isinstance(plan, GhostPlan):
                raise FormatError(f"field {name!r} of non-zero size {plan.size} has no compound member")
            return FieldPlan(name, "ghost", plan, None, field_type)
        if plan is None:
            plan = self.plan_for(member.type, declared if isinstance(declared, JuliaType) else None)
        if isinstance(plan, GhostPlan):
            # Some JLD2 versions keep a stored member for a ghost-typed field; read nothing.
            pass
        elif plan.size != member.type.size:
            raise FormatError(
                f"field {name!r}: member of {member.type.size} bytes but its type needs {plan.size}"
            )
        storage = "reference" if member.type.cls == H5Class.REFERENCE else "inline"
        return FieldPlan(name, storage, plan, member, field_type)

    def _string_list(self, attr: Attribute) -> list[str]:
        if not _is_vlen_string(attr.type) or attr.space.kind not in ("simple", "scalar"):
            raise FormatError(f"attribute {attr.name!r} is not a list of strings", offset=attr.data_offset)
        n = attr.space.count
        if n * 16 > len(attr.data):
            raise FormatError(f"attribute {attr.name!r} is truncated", offset=attr.data_offset)
        return [decode_text(self.reader.heap_bytes(attr.data, 16 * i)) for i in range(n)]

    def _ref_list(self, attr: Attribute) -> list[int]:
        if attr.type.cls != H5Class.REFERENCE or attr.space.kind not in ("simple", "scalar"):
            raise FormatError(f"attribute {attr.name!r} is not a list of references", offset=attr.data_offset)
        n = attr.space.count
        if n * 8 > len(attr.data):
            raise FormatError(f"attribute {attr.name!r} is truncated", offset=attr.data_offset)
        return [_U64.unpack_from(attr.data, 8 * i)[0] for i in range(n)]

    # --- uncommitted datatypes ----------------------------------------------------------------
    def _basic_plan(self, t: H5Type, declared: JuliaType | None) -> Plan:
        cls = t.cls
        jt = basic_julia_type(t)
        if cls in (H5Class.FIXED, H5Class.ENUM):
            base = t.base if cls == H5Class.ENUM and t.base is not None else t
            if base.cls == H5Class.FIXED and base.size == 16:
                return Int128Plan(base.signed and cls == H5Class.FIXED, base.byte_order, jt, t)
            dtype = base.numpy_dtype()
            if dtype is None:
                return BitsPlan(jt, t.size, t)
            if cls == H5Class.ENUM:
                dtype = np.dtype(f"{dtype.byteorder if dtype.byteorder != '=' else '<'}u{dtype.itemsize}")
            return NumberPlan(dtype, jt, t)
        if cls == H5Class.FLOAT:
            dtype = t.numpy_dtype()
            if dtype is None:
                raise UnsupportedError(f"floating-point type of size {t.size} with a non-IEEE layout")
            return NumberPlan(dtype, jt, t)
        if cls == H5Class.BITFIELD:
            if t.size == 1:
                self.writer_traits.add("bool:bitfield")  # JLD2 >= v0.3.3 (_era)
                return BoolPlan(jt, t)
            dtype = t.numpy_dtype()
            if dtype is None:
                return BitsPlan(jt, t.size, t)
            return NumberPlan(dtype, JuliaType(f"Core.UInt{8 * t.size}"), t)
        if cls == H5Class.STRING:
            return FixedStringPlan(t.size, t.string_padding, jt, t)
        if cls == H5Class.VLEN:
            if t.is_vlen_string:
                return VlenStringPlan(False, jt, t)
            if t.base is None:
                raise FormatError("variable-length sequence without a base type")
            base_plan = self.plan_for(t.base)
            array_t = JuliaType("Core.Array", (base_plan.element_type, np.int64(1)))
            return VlenSequencePlan(base_plan, array_t, t)
        if cls == H5Class.REFERENCE:
            if t.ref_type != 0 or t.size != 8:
                raise UnsupportedError("HDF5 region references are not supported")
            return ReferencePlan(declared if declared is not None else ANY, t)
        if cls == H5Class.OPAQUE:
            return BitsPlan(jt, t.size, t)
        if cls == H5Class.COMPOUND:
            _check_members(t)
            if declared is not None:
                return self._structural(t, declared, {})
            return self._compound(t, None, {}, "namedtuple", None)
        raise UnsupportedError(f"HDF5 datatype class {cls.name} is not supported")
