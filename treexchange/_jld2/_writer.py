"""The JLD2 write session: value-model values -> the bytes JLD2.jl 0.6.5 writes (format 0.2.0).

This module mirrors JLD2.jl's write path step by step (its src/datasets.jl ``write_dataset``,
src/data/writing_datatypes.jl ``h5type``/``h5fieldtype``/``commit_compound``/``commit``,
``refs_from_types``, src/global_heaps.jl ``write_heap_object``, src/groups.jl ``save_group``,
src/JLD2.jl ``close``) so that the *order of allocation* is the same as Julia's: committed types
get the same ids, parameter datasets land at the same addresses, the global heap grows the same
way. Re-encoding a file Julia wrote therefore reproduces it byte for byte (tests/test_byte_identity.py).

The Python names follow JLD2's so the two can be read side by side; the code is our own.

Allocation model: ``self.end`` is JLD2's ``f.end_of_data`` (absolute). An object header is
*reserved* (``end`` advanced past it) before anything it references is written; referenced
objects are written behind it; then the header bytes are emitted at the reserved offset. Array
payloads of contiguous datasets start 8-byte aligned, as in JLD2.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain
from typing import Any, BinaryIO, NamedTuple, TypeVar

import numpy as np

from .._errors import (
    ConversionError,
    LimitError,
    PathSegment,
    TreexchangeError,
    UnsupportedError,
    WriteError,
)
from .._gc import gc_paused
from .._hdf5._datatype import _nesting
from .._hdf5._model import H5Class, H5Type
from .._juliatype import JuliaType
from .._limits import DEFAULT_LIMITS, Limits, datatype_depth
from .._recursion import stack_for_depth
from .._typeof import closure_as_struct
from .._values import (
    UNDEF,
    Closure,
    JuliaArray,
    JuliaBits,
    JuliaStruct,
    NamedTuple as JlNamedTuple,
    Singleton,
    Symbol,
    closure_struct,
)
from . import _encode_hdf5 as enc
from ._dictkeys import check_julia_keys
from ._era import (
    BASE_PAIR,
    BOOL_OPAQUE,
    DATATYPE_V0,
    DICT_AS_VECTOR,
    GROUPS_WITHOUT_ROOM,
    LAYOUT_0_4_51,
    LAYOUT_0_4_52,
    NO_NTUPLE,
    NTUPLE_ONE,
    SESSION_PER_NAME,
    Source,
)
from ._writer_arrays import (
    Compression,
    column_major_bytes,
    compressed_chunks,
    little_endian,
    plan_chunk,
)
from ._writer_bulk import encode_refs, worth_bulk
from ._writer_groups import SavedHeader, add_links
from ._writer_rows import LAYOUT_CONTIGUOUS as _LAYOUT_CONTIGUOUS
from ._writer_runs import DATA as _DATA, PairValue as _PairValue, PairVector as _PairVector, utf8 as _utf8
from ._writer_sink import Sink
from ._writer_types import JT, MAX_INLINE_SIZE, UNION_EL, Cat, TypeFactory, shown_type, written_text
from ._writer_undeclared import declare_abstract_fields

BASE = enc.FILE_HEADER_LENGTH
COMPACT_LIMIT = 8192
"""Non-array datasets smaller than this are stored compact (inside their header)."""
FORMATS = ("0.2.0", "0.1.1")
"""The format versions the writer can write: JLD2.jl >= 0.5 (``0.2.0``, the default) and the
format of JLD2.jl 0.3.0 - 0.4.55 (``0.1.1``: v0.4.46 by default, other releases by ``_era`` rules)."""
SMALL_PAYLOAD = 64 << 10
"""Array payloads up to this size are buffered with the metadata instead of written directly."""

_MESSAGES_KEPT = 4096  # header messages and plans remembered per file (a model has a handful of shapes)
_NATIVE_LITTLE = ("<", "|", "=") if np.little_endian else ("<", "|")  # byte orders written as they are

_I64 = np.dtype("<i8")


@dataclass(frozen=True)
class _Format:
    """How one format version lays out a dataset header (JLD2.jl's ``write_dataset``).

    Each rule is a difference between JLD2.jl 0.6 (format 0.2.0) and JLD2.jl 0.4.x before
    0.4.51 (format 0.1.1, ``src/datasets.jl`` at tag v0.4.46), read from JLD2.jl's history:
    0.4.51 (commit d57995a, July 2024) introduced the reserved NIL message, 0.4.52 the aligned,
    array-only-contiguous layout choice that 0.5 then kept. The rules of releases other than
    v0.4.46 are applied by :func:`_release_format` for an input that shows them (``_era``).
    """

    version: str
    continuation_placeholder: bool
    """A 16-byte NIL message reserved at the end of every dataset header (0.2.0 only)."""
    array_compact_limit: int
    """Arrays with fewer data bytes are stored compact (0.1.1: < 8192; 0.2.0: only empty arrays)."""
    scalar_compact_limit: int
    """Non-array datasets with fewer data bytes are stored compact (0.1.1: < typemax(UInt16))."""
    align_contiguous: bool
    """Contiguous data starts 8-byte aligned (0.2.0) or right after its header (0.1.1)."""
    field_datatypes: bool
    """A struct's committed field types are listed in a ``field_datatypes`` attribute (one
    reference per stored member, null for inline ones) and fields without data are left out
    (0.1.1, ``commit_compound`` at v0.4.46), instead of ``field_names`` + ``field_types``
    listing ghost fields too (0.2.0)."""
    ntuple_from: int
    """Homogeneous tuple types of this many or more parameters are named ``NTuple{N,T}`` in a
    DataType (0.1.1: N >= 2, ``h5convert!`` for ``Type{<:NTuple}``); 0.2.0's ``reduce(==, ...)``
    test makes it N == 2 only (0 stands for that)."""
    shared_attribute_session: bool
    """The ``julia_type`` / ``written_type`` attributes of a committed datatype are written in the
    file's datatype session (0.1.1: ``write_attribute(cio, f, attr, f.datatype_wsession)`` in
    ``commit``, up to v0.4.51), so a DataType dataset one of them wrote is referenced again by the
    next; 0.2.0 gives each attribute a fresh session (``write_header_message``, since v0.4.52)."""
    dict_as_vector: bool = False
    datatype_version_zero: bool = False
    """Datatype messages say version 0, fixed-point types excepted (JLD2 0.4.51 and 0.4.52,
    whose constructors left out the version bits): an era rule (``_era``)."""
    tuple_names: bool = True
    """Homogeneous tuple types are named ``Tuple{T}`` / ``NTuple{N,T}`` in a DataType (JLD2 >=
    v0.4.19); before, every tuple type was ``Core.Tuple{...}``: an era rule (``_era``)."""
    bool_opaque: bool = False
    """Bool is a committed 1-byte opaque type (JLD2 < v0.3.3), not a 1-byte bitfield: an era rule."""
    group_link_room: bool = True
    """A new group's header leaves room for 4 links of 8-byte names (JLD2 >= v0.4.4's
    ``group_extra_space``); earlier releases left none: an era rule (``_era``)."""
    continuation_link_room: bool = False
    """A continuation chunk a later session adds to a group header leaves room for more links
    (``save_group`` before v0.4.51, format 0.1.1); later releases' ``attach_message`` leaves none."""
    """A Dict is custom-serialized as its ``Vector{Pair{K,V}}`` (JLD2 < v0.4.42), not as a
    ``JLD2.SerializedDict``: an older rule, followed when the input shows it (``_era``)."""


_FORMATS = {
    "0.2.0": _Format("0.2.0", True, 1, COMPACT_LIMIT, True, False, 0, False),
    "0.1.1": _Format("0.1.1", False, 8192, 0xFFFF, False, True, 2, True, continuation_link_room=True),
}


def _release_format(base: _Format, rules: frozenset[str]) -> _Format:
    """``base`` (format 0.1.1 as JLD2 v0.4.46 writes it) with the rules of another 0.1.1
    release (:mod:`treexchange._jld2._era`): older ones name a 1-tuple ``NTuple{1,T}`` (< v0.4.41)
    and write a Dict as its ``Vector{Pair}`` (< v0.4.42); v0.4.51 reserves a NIL message in every
    dataset header and names only ``NTuple{2,T}``; v0.4.52 also takes 0.5's layout choice
    (0.2.0's) and writes a committed type's attributes in fresh sessions."""
    fmt = replace(base, dict_as_vector=DICT_AS_VECTOR in rules)
    if NTUPLE_ONE in rules:
        fmt = replace(fmt, ntuple_from=1)
    if NO_NTUPLE in rules:
        fmt = replace(fmt, tuple_names=False)
    if LAYOUT_0_4_51 in rules or LAYOUT_0_4_52 in rules:
        fmt = replace(fmt, continuation_placeholder=True, ntuple_from=0, continuation_link_room=False)
    if DATATYPE_V0 in rules:
        fmt = replace(fmt, datatype_version_zero=True)
    if GROUPS_WITHOUT_ROOM in rules:
        fmt = replace(fmt, group_link_room=False)
    if BOOL_OPAQUE in rules:
        fmt = replace(fmt, bool_opaque=True)
    if LAYOUT_0_4_52 in rules:
        new = _FORMATS["0.2.0"]
        fmt = replace(
            fmt,
            array_compact_limit=new.array_compact_limit,
            scalar_compact_limit=new.scalar_compact_limit,
            align_contiguous=new.align_contiguous,
            shared_attribute_session=new.shared_attribute_session,
        )
    return fmt


class Committed(NamedTuple):
    """A committed datatype: relative address of its object header and its 1-based id."""

    offset: int
    number: int


@dataclass
class _Attr:
    """An attribute to be written into a header; ``encode`` produces its data *at write time*
    (it may write other objects, e.g. the parameters of a ``julia_type``)."""

    name: str
    dtype: H5Type | Committed
    space_kind: int
    dims: tuple[int, ...]
    nbytes: int
    encode: Callable[[], bytes]

    @property
    def message_size(self) -> int:
        dt_size = (
            enc.SHARED_DATATYPE_SIZE if isinstance(self.dtype, Committed) else enc.datatype_size(self.dtype)
        )
        return enc.attribute_message_size(self.name, dt_size, len(self.dims), self.nbytes)

    def message(self) -> bytes:
        data = self.encode()
        if len(data) != self.nbytes:
            raise WriteError(f"attribute {self.name}: {len(data)} bytes, expected {self.nbytes}")
        dtype = self.dtype.offset if isinstance(self.dtype, Committed) else self.dtype
        return enc.attribute_message(self.name, dtype, self.space_kind, self.dims, data)


@dataclass
class _Group:
    """A group being built: links to written objects and child groups (created by ``a/b`` names)."""

    links: dict[str, int] = field(default_factory=dict)
    children: dict[str, _Group] = field(default_factory=dict)
    saved: SavedHeader | None = None
    """Its header, once a write session closed (the first ``saved.count`` links are in it)."""


@dataclass
class _GlobalHeap:
    offset: int = 0  # absolute; 0 = none yet
    length: int = 0
    free: int = 0
    count: int = 0


@dataclass
class _Space:
    """A dataspace and the attributes JLD2 attaches to it (``WriteDataspace``)."""

    kind: int
    dims: tuple[int, ...]
    attrs: list[_Attr]

    @property
    def numel(self) -> int:
        return 0 if self.kind == enc.DS_NULL else math.prod(self.dims)


@dataclass(frozen=True)
class _Data:
    """What a dataset stores: ``size`` bytes, made by ``encode()`` (at write time: it may write
    other objects) or taken from ``array`` (written column-major, in bounded pieces)."""

    size: int
    encode: Callable[[], bytes] | None = None
    array: np.ndarray | None = None
    is_array: bool = False
    """An ``Array`` value: stored contiguous (or chunked) even when small, as JLD2 does."""
    chunkable: bool = False
    """Compress it (chunked layout); needs ``array``."""

    @classmethod
    def of_array(cls, size: int, array: np.ndarray, chunkable: bool) -> _Data:
        """``_Data(size, array=array, is_array=True, chunkable=chunkable)``, made without the
        frozen dataclass ``__init__`` (one per array written)."""
        obj = object.__new__(cls)
        obj.__dict__.update(size=size, array=array, is_array=True, chunkable=chunkable)
        return obj

    @classmethod
    def of_encoder(cls, size: int, encode: Callable[[], bytes]) -> _Data:
        """``_Data(size, encode=encode)`` without the dataclass ``__init__`` (one per struct,
        Pair or layer written)."""
        obj = object.__new__(cls)
        obj.__dict__.update(size=size, encode=encode)
        return obj

    def materialize(self) -> bytes:
        """All the bytes at once (compact data and small payloads only)."""
        if self.encode is not None:
            return self.encode()
        return _array_bytes(self.array)


_NO_DATA = _Data(0, encode=lambda: b"")
_SCALAR = _Space(enc.DS_SCALAR, (), [])  # a scalar dataspace without attributes (never modified)


def _align8(offset: int) -> int:
    """``offset`` rounded up to a multiple of 8 (JLD2 aligns array payloads and heaps so).

    Example:
        >>> _align8(560), _align8(561), _align8(567)
        (560, 568, 568)
    """
    return offset + -offset % 8


def _ref(offset: int) -> bytes:
    return struct.pack("<Q", offset)


class JLD2Writer:
    """One JLD2 file being written: call :meth:`write` per top-level name, then :meth:`close`.

    Args:
        file: a binary file opened for writing (random access); it is truncated to the final size.
        compress: a :class:`~treexchange._jld2._writer_arrays.Compression`, or ``None``.
        producer: the producer note stored after the format string in the user block.
        root_attributes: UTF-8 string attributes of the root group.
        limits: the bounds of what is written: the stack is made room for ``max_depth``
            levels, and no inline type nests deeper than ``datatype_depth(limits)`` (what the
            reader parses back).

    Example:
        >>> import io
        >>> buf = io.BytesIO()
        >>> w = JLD2Writer(buf)
        >>> w.write("a", np.zeros(2))
        >>> w.close()
        828
    """

    def __init__(
        self,
        file: BinaryIO,
        *,
        compress: Compression | None = None,
        producer: str = enc.DEFAULT_PRODUCER,
        root_attributes: dict[str, str] | None = None,
        limits: Limits = DEFAULT_LIMITS,
        format_version: str = enc.FORMAT_VERSION,
        on_write: Callable[[int], None] | None = None,
        source: Source | None = None,
    ) -> None:
        if format_version not in _FORMATS:
            raise UnsupportedError(
                f"JLD2 format {format_version!r} cannot be written (supported: {', '.join(FORMATS)})"
            )
        self.format = _FORMATS[format_version]
        self.source = source or Source()
        if self.source.rules:
            # Rules of the JLD2 release a format-0.1.1 input shows (treexchange._jld2._era),
            # other than v0.4.46's, for re-encoding that file.
            self.format = _release_format(self.format, self.source.rules)
        self.compress: Compression | None = None
        self.set_compression(compress)
        self.sink = Sink(file, on_write)
        # max_depth: the stack made room for; datatype_depth: the deepest inline type written
        # (what the reader parses back with the same limits).
        self.limits = limits
        self.producer = producer
        self.root_attributes = dict(root_attributes or {})
        self._session_per_name = SESSION_PER_NAME in self.source.rules
        pair_name = "Base.Pair" if BASE_PAIR in self.source.rules else "Core.Pair"
        self.types = TypeFactory(
            dict_as_vector=self.format.dict_as_vector,
            pair_name=pair_name,
            layouts=self.source.layouts,
            mutable=self.source.mutable,
        )
        self.end = enc.DATA_START
        self.datatypes: list[H5Type] = []
        self.committed: dict[str, Committed] = {}
        self.types_links: dict[str, int] = {}
        self.heap = _GlobalHeap()
        self._heap_marker: tuple[int, bytes] | None = None  # see write_heap_object
        self.root = _Group()
        self._saved_groups: list[_Group] = []  # in the order saved (their headers put at close)
        self._root_address = 0
        self.wsession: dict[Hashable, int] = {}
        self.datatype_wsession: dict[Hashable, int] = {}
        self._keepalive: list[Any] = []
        self._inline_sizes: dict[str, int] = {}
        # encoded dataspace and datatype messages of dataset headers (_space_message, _dtype_message)
        self._messages: dict[Hashable, bytes] = {}
        self._small_heads: dict[tuple[bytes, bytes], tuple[bytes, int]] = {}  # _write_small_array
        self._array_plans: dict[Hashable, tuple[JT, _Space, H5Type | Committed, int]] = {}  # _write_array
        # (dtype, shape) -> (header head, header size, payload size) of a small array written by
        # reference (_write_ndarray_ref); id(jt) -> template of a compact scalar dataset (_write_compact)
        self._ref_plans: dict[Hashable, tuple[bytes, int, int]] = {}
        self._compact_plans: dict[int, tuple[JT, bytes, int, int, bytes]] = {}
        self._dict_plans: dict[int, tuple[JT, bytes, int, int, bytes]] = {}  # id(jt) -> its header's
        self._message_types: dict[Hashable, H5Type] = {}
        self._prepared: dict[int, Any] = {}  # id -> object typed by prepare (kept: ids stay unique)
        self._closed = False

    # ================================================================================ public
    def write(self, name: str, value: Any) -> None:
        """Write ``value`` under ``name`` (``"a/b"`` creates groups), like ``f[name] = value``."""
        if self._closed:
            raise RuntimeError("writer is closed")
        group, leaf = self._pathize(name)
        path: tuple[PathSegment, ...] = (name,)
        if self._session_per_name:
            self.wsession = {}  # JLD2's write(f, name, value) without a session (_era)
        try:
            # The collector paused: a large model makes hundreds of thousands of lasting small
            # objects (tracking keys, buffered pieces) and no garbage cycles worth collecting.
            with stack_for_depth(self.limits.max_depth), gc_paused():
                self.prepare([(name, value)])
                jt = self.types.of_value(value, path)
                offset = self.write_dataset(value, jt, self.wsession, path)
        except TreexchangeError as err:
            raise err.with_context(path=path) from None
        except RecursionError:
            raise LimitError(
                "value nested too deeply to write (save checks Limits().max_depth first)", path=path
            ) from None
        except UnicodeEncodeError as err:
            raise ConversionError(
                f"text with a lone surrogate ({err.object[err.start : err.end]!r}) has no UTF-8 form",
                path=path,
            ) from None
        group.links[leaf] = offset

    def prepare(self, items: Sequence[tuple[str, Any]]) -> None:
        """Learn the Julia type of every struct and bits value in ``items`` before anything is
        written, so that no type is laid out while known by name only (from a type parameter
        such as ``Space{Tuple{Sector,Sector}}``) when a value shows its layout later: committed
        types then follow JLD2's layout. Call it with every value of the file first (``save`` and
        ``convert`` do); :meth:`write` calls it for its own value. Visits each object once.

        The values are typed after the walk, in the order met: first the fields of struct types
        without declared field types whose instances disagree are declared ``Any``
        (:mod:`._writer_undeclared`), as the first instance typed fixes a type's fields."""
        seen = self._prepared
        typed: list[tuple[Any, tuple[PathSegment, ...]]] = []  # structs, arrays and bits values
        # The collector paused: a large tree is many lasting objects and no garbage cycles. The
        # stack made room for as write() makes it: a struct's type is the types of its fields,
        # learnt recursively (five frames a level: structs nested 200 deep, which BSON.jl files
        # and load hold, stopped at Python's default limit with a bare RecursionError).
        with stack_for_depth(self.limits.max_depth), gc_paused():
            for name, value in items:
                todo: list[tuple[Any, tuple[PathSegment, ...]]] = [(value, (name,))]
                while todo:
                    v, path = todo.pop()
                    if isinstance(v, (str, np.ndarray, np.generic, int, float)) or v is None:
                        continue
                    if id(v) in seen:
                        continue
                    seen[id(v)] = v
                    if type(v) is JlNamedTuple:
                        # (A layer's arrays are leaves: not visited, no path made for them.)
                        todo.extend((x, (*path, k)) for k, x in v._data.items() if type(x) is not np.ndarray)
                    elif isinstance(v, JuliaStruct):
                        todo.extend((f, (*path, k)) for k, f in v.fields.items())
                        typed.append((v, path))
                    elif isinstance(v, JuliaArray):
                        todo.extend((x, (*path, i)) for i, x in enumerate(v.data.ravel(order="F"), 1))
                        typed.append((v, path))
                    elif isinstance(v, JuliaBits):
                        typed.append((v, path))
                    elif isinstance(v, Closure) and v.captures:
                        struct = closure_struct(v)  # (written as this struct: its layout too)
                        if struct is not None:
                            todo.append((struct, path))
                    elif isinstance(v, JlNamedTuple):
                        todo.extend((x, (*path, k)) for k, x in v.items())
                    elif isinstance(v, (list, tuple)):
                        if type(v) is tuple and _arrays_only(v):
                            continue  # a model's layers: nothing in them to learn a type from
                        todo.extend((x, (*path, i)) for i, x in enumerate(v, 1))
                    elif isinstance(v, dict):
                        if set(map(type, v)) == {str} and set(map(type, v.values())) == {np.ndarray}:
                            continue  # (a Dict of arrays: nothing in it to learn a type from)
                        for k, x in v.items():  # (str keys and arrays are leaves: no path made)
                            if type(k) is not str:
                                todo.append((k, path))
                            if type(x) is not np.ndarray:
                                todo.append((x, (*path, str(k))))
            declare_abstract_fields([(v, p) for v, p in typed if type(v) is JuliaStruct], self.types)
            for v, path in typed:
                self._type_for_layout(v, path)

    def _type_for_layout(self, value: Any, path: tuple[PathSegment, ...]) -> None:
        try:
            self.types.of_value(value, path)
        except TreexchangeError:
            pass  # reported with its path when the value itself is written

    def create_group(self, name: str) -> None:
        """An empty group ``name`` (JLD2's ``Group(f, name)``), intermediate groups included."""
        g = self.root
        for part in name.split("/"):
            if not part:
                continue
            if part in g.links and part not in g.children:  # (a saved group is linked too)
                raise ConversionError(f"{name!r}: {part!r} is a dataset, not a group", path=(name,))
            g = g.children.setdefault(part, _Group())

    def close(self, grown: Sequence[str] = ()) -> int:
        """Write the groups, the user block and the superblock (JLD2's ``close``); returns the size.
        ``grown``: see :meth:`close_session`."""
        if self._closed:
            return self.end
        self._closed = True
        self._save_groups(grown)
        self._put_heap_marker()
        for g in self._saved_groups:
            for offset, chunk in _need(g.saved, "group header").chunks:
                self.sink.put_checksummed(offset, bytes(chunk))
        self.sink.put(0, enc.user_block(self.producer, self.format.version))
        self.sink.put(BASE, enc.superblock_v2(BASE, self.end, self._root_address))
        self.sink.finish(self.end)
        return self.end

    def set_compression(self, compress: Compression | None) -> None:
        """Compress the arrays written from now on so (JLD2's ``compress`` of a file opened)."""
        if compress is not None and self.format.version != "0.2.0":
            raise UnsupportedError(
                f"compression in JLD2 format {self.format.version} is not supported (write format 0.2.0)"
            )
        self.compress = compress

    def close_session(self, grown: Sequence[str] = ()) -> None:
        """End a write session as JLD2's ``close`` does and go on as ``jldopen(path, "a+")`` would
        (:mod:`treexchange._jld2._sessions`): the groups are saved (links added to headers already
        in the file go into their free space or a continuation chunk), new objects follow the
        end of the file, committed types are reused, and the global heap, the write session and
        the datatype session start afresh. ``grown``: the groups (``"a/b"`` paths, ``"_types"``)
        whose header an earlier session wrote, in the order to save them (the input's: JLD2 saves
        them in the order of a ``Dict``); the others follow, the root group last."""
        if self._closed:
            raise RuntimeError("writer is closed")
        self._save_groups(grown)
        self._put_heap_marker()
        self.heap = _GlobalHeap()
        self.wsession = {}
        self.datatype_wsession = {}
        if self.source.recommitted:
            # Types the input committed again in a later session: JLD2 read them back as not
            # canonical and did not reuse them. The plans made with them go too.
            for key in self.source.recommitted:
                self.committed.pop(key, None)
            for plans in (self._array_plans, self._ref_plans, self._compact_plans, self._messages):
                plans.clear()

    # ================================================================================ groups
    def _pathize(self, name: str) -> tuple[_Group, str]:
        if not isinstance(name, str) or not name:
            raise ConversionError(f"dataset names must be non-empty strings, not {name!r}")
        g = self.root
        parts = name.split("/")
        for i, part in enumerate(parts[:-1]):
            if not part:
                if i == 0:
                    g = self.root
                continue
            if part in g.links and part not in g.children:  # (a saved group is linked too)
                raise ConversionError(f"{'/'.join(parts[: i + 1])!r} is a dataset, not a group", path=(name,))
            g = g.children.setdefault(part, _Group())
        leaf = parts[-1]
        if not leaf:
            raise ConversionError(f"dataset name {name!r} ends with '/'", path=(name,))
        if g is self.root and leaf == "_types":
            raise ConversionError("'_types' is reserved by JLD2 for committed types", path=(name,))
        if leaf in g.links or leaf in g.children:
            raise ConversionError(f"a group or dataset named {leaf!r} is already present", path=(name,))
        return g, leaf

    def _save_groups(self, grown: Sequence[str]) -> None:
        """What JLD2's ``close`` saves: the groups an earlier session wrote (``grown`` first, in
        that order), ``/_types`` (new, or the links of types committed since the last session),
        then the root group with its new children."""
        if self.types_links:
            types = self.root.children.get("_types")
            if types is None:
                self.root.children["_types"] = _Group(links=dict(self.types_links))
            else:
                types.links.update(self.types_links)
        for path in grown:
            g: _Group | None = self.root
            for part in (p for p in path.split("/") if p):
                g = g.children.get(part) if g is not None else None
            if g is not None and g is not self.root and g.saved is not None:
                self._save_group(g)
        self._save_group(self.root, self.root_attributes)

    def _save_group(self, g: _Group, attributes: dict[str, str] | None = None) -> int:
        """JLD2's ``save_group``: children first (a new one's header, then its link), then the
        group's header, or, for a header an earlier session wrote, its new links (JLD2's
        ``load_group`` state: into free space, else a continuation chunk)."""
        for name, child in g.children.items():
            if child.saved is None:
                g.links[name] = self._save_group(child)
            else:
                self._save_group(child)
        if g.saved is not None:
            if len(g.links) > g.saved.count:
                new = list(g.links.items())[g.saved.count :]
                room = self.format.continuation_link_room
                self.end = add_links(g.saved, new, self.end, BASE, room)
            return g.saved.chunks[0][0] - BASE
        attrs = [self._string_attr(k, v) for k, v in (attributes or {}).items()]
        links = list(g.links.items())
        # Free space for 4 links of 8-byte names (est_num_entries, est_link_name_len defaults).
        extra = min(max((4 - len(links)) * (12 + 8 + 4), 0), 0xFFFF) if self.format.group_link_room else 0
        total = len(enc.LINK_INFO_MESSAGE) + len(enc.GROUP_INFO_MESSAGE) + enc.CONTINUATION_PLACEHOLDER_SIZE
        total += sum(enc.link_message_size(n) for n, _ in links) + extra
        total += sum(a.message_size for a in attrs)
        start = self.end
        self.end += enc.object_header_size(total)
        parts = [enc.LINK_INFO_MESSAGE, enc.GROUP_INFO_MESSAGE]
        parts += [a.message() for a in attrs]
        parts += [enc.link_message(n, t) for n, t in links]
        if extra:
            parts.append(enc.nil_message(extra - 4))
        parts.append(enc.CONTINUATION_PLACEHOLDER)
        # Put when the file closes (a later session may add links to it).
        g.saved = SavedHeader([(start, bytearray(enc.object_header_unsummed(b"".join(parts))))], len(links))
        self._saved_groups.append(g)
        if g is self.root:
            self._root_address = start - BASE
        return start - BASE

    def _string_attr(self, name: str, value: str) -> _Attr:
        """A scalar variable-length UTF-8 string attribute: the text goes to the global heap and
        the header holds 16 bytes, so a long text (an embedded schema of a large model) never
        meets the 64 KiB limit of one header message. libhdf5 and our reader decode it as str."""
        raw = value.encode("utf-8")
        size = enc.attribute_message_size(name, enc.datatype_size(enc.VLEN_UTF8), 0, 16) - 4
        if size > 0xFFFF:
            raise ConversionError(
                f"root attribute name {name[:20]!r}... is too long: its HDF5 attribute message would "
                f"be {size} bytes (the format allows 65535)"
            )

        def encode() -> bytes:
            return self.store_vlen(raw, libhdf5_readable=True)

        return _Attr(name, enc.VLEN_UTF8, enc.DS_SCALAR, (), 16, encode)

    # ================================================================================ heap
    def write_heap_object(self, data: bytes, *, libhdf5_readable: bool = False) -> tuple[int, int]:
        """JLD2's ``write_heap_object``: returns (relative collection address, object index).

        JLD2 stores a collection's size without its 16-byte header, while libhdf5 counts the
        header in: an object reaching into the last 16 bytes of a collection (a new collection
        made for an object larger than 4080 bytes) is out of libhdf5's reach. JLD2's bytes are
        kept by default; ``libhdf5_readable`` makes a new collection 16 bytes larger (JLD2 reads
        the trailing free space as such)."""
        psz = len(data)
        objsz = 16 + psz
        objsz += -objsz % 8
        gh = self.heap
        filled = gh.count >= 0xFFFF
        if objsz + 16 < gh.free and not filled:
            pass
        elif gh.offset != 0 and self.end == gh.offset + 16 + gh.length and not filled:
            delta = objsz - gh.free + 16
            gh.free += delta
            gh.length += delta
            self.sink.put(gh.offset + 8, struct.pack("<Q", gh.length))
            self.end += delta
        else:
            self._put_heap_marker()  # the last one of the collection left behind
            size = max(objsz + 16 if libhdf5_readable else objsz, 4096)
            offset = _align8(self.end)
            self.sink.put(offset, enc.global_heap_header(size))
            self.end = offset + 16 + size
            self.heap = gh = _GlobalHeap(offset, size, size, 0)
        gh.count += 1
        index = gh.count
        objoffset = gh.offset + 16 + gh.length - gh.free
        gh.free -= objsz
        # The free-space object after it: each new object starts where the last one's stood
        # and covers it (16 bytes or more), so only a collection's last one is ever seen; it is
        # put when the collection is left behind or the file closed (one piece per object less,
        # and no overlapping pieces for the flush to assemble).
        marker = (objoffset + objsz, struct.pack("<QQ", 0, gh.free - 16)) if gh.free >= 16 else None
        self._heap_marker = marker
        # With its padding (zeros, as the hole would read): the next object starts right after,
        # so a run of heap objects is one piece of metadata, written in one call, not one each.
        self.sink.put(objoffset, enc.global_heap_object(index, psz) + data + bytes(objsz - 16 - psz))
        return gh.offset - BASE, index

    def _put_heap_marker(self) -> None:
        """Put the free-space object of the current heap collection (see write_heap_object)."""
        marker, self._heap_marker = self._heap_marker, None
        if marker is not None:
            self.sink.put(*marker)

    def store_vlen(self, data: bytes, count: int | None = None, *, libhdf5_readable: bool = False) -> bytes:
        """A 16-byte vlen element pointing at a new heap object holding ``data``."""
        heap, index = self.write_heap_object(data, libhdf5_readable=libhdf5_readable)
        return struct.pack("<IQI", len(data) if count is None else count, heap, index)

    # ================================================================================ commits
    def lookup(self, jt: JT) -> Committed | None:
        return self.committed.get(jt.key)

    def bootstrap(self) -> Committed:
        """Commit the self-describing ``Core.DataType`` type (JLD2's h5fieldtype for DataType)."""
        found = self.committed.get(self.types.DATATYPE.key)
        if found is not None:
            return found
        cdt = self._register(self.types.DATATYPE, enc.H5TYPE_DATATYPE)
        attr = self._datatype_attr("julia_type", self.types.DATATYPE, dtype=cdt)
        self._commit_write(enc.H5TYPE_DATATYPE, [attr])
        return cdt

    def _register(self, readas: JT, dtype: H5Type) -> Committed:
        offset = self.end - BASE
        cdt = Committed(offset, len(self.datatypes) + 1)
        self.committed[readas.key] = cdt
        self.datatypes.append(dtype)
        self.types_links[f"{cdt.number:08d}"] = offset
        return cdt

    def commit(self, dtype: H5Type, writeas: JT, readas: JT, extra: Sequence[_Attr] = ()) -> Committed:
        """JLD2's ``commit``: write a committed datatype with its ``julia_type`` (and
        ``written_type`` when custom-serialized) plus ``extra`` attributes."""
        boot = self.bootstrap()
        cdt = self._register(readas, dtype)
        attrs = [self._datatype_attr("julia_type", readas, dtype=boot)]
        if writeas is not readas:
            attrs.append(self._datatype_attr("written_type", writeas, dtype=boot))
        attrs.extend(extra)
        self._commit_write(dtype, attrs)
        return cdt

    def _commit_write(self, dtype: H5Type, attrs: list[_Attr]) -> None:
        body = enc.encode_datatype(self._versioned(dtype))
        psz = 4 + len(body) + sum(a.message_size for a in attrs)
        offset = self.end
        size = enc.object_header_size(psz)
        self.end += size
        parts = [enc.message(enc.MSG_DATATYPE, body, enc.DATATYPE_MSG_FLAGS_COMMITTED_OBJECT)]
        parts += [a.message() for a in attrs]
        header = enc.object_header_unsummed(b"".join(parts))  # the sink appends the checksum
        if len(header) + 4 != size:
            raise WriteError("committed datatype header size mismatch")
        self.sink.put_checksummed(offset, header)

    def _datatype_attr(self, name: str, t: JT, *, dtype: Committed) -> _Attr:
        # A fresh write session per attribute, as JLD2's write_header_message(io, f, attr) does;
        # format 0.1.1's commit wrote them in the datatype session (_Format.shared_attribute_session).
        shared = self.format.shared_attribute_session
        return _Attr(
            name,
            dtype,
            enc.DS_SCALAR,
            (),
            32,
            lambda: self.encode_datatype_value(t, self.datatype_wsession if shared else {}),
        )

    def commit_compound(self, writeas: JT, readas: JT) -> Committed:
        """JLD2's ``commit_compound``: field types first (committing nested types), then the type."""
        members: list[tuple[str, H5Type]] = []
        field_names: list[str] = []
        field_types: list[int] = []
        nondefault = False
        old_style = self.format.field_datatypes
        for name, ft in writeas.fields:
            fw = ft.writeas
            dtype = self.h5fieldtype(fw, ft, True)
            if dtype is None and old_style:
                continue  # format 0.1.1: a field without data is not listed at all
            if dtype is None:
                cdt = self.lookup(ft)
                if cdt is None:
                    cdt = self.commit(enc.opaque_type(1), fw, ft, [self._empty_attr()])
                field_names.append(name)
                field_types.append(cdt.offset)
                nondefault = True
                continue
            if isinstance(dtype, Committed):
                type_offset = dtype.offset
                dtype = self.datatypes[dtype.number - 1]
                nondefault = True
            else:
                type_offset = 0
            field_names.append(name)
            field_types.append(type_offset)
            members.append((name, dtype))
        compound = enc.compound_type(members)
        deepest = datatype_depth(self.limits)
        if _type_chain(compound) > deepest + 1:
            # The reader (and libhdf5-based tools) stop at this nesting: never write what
            # treexchange cannot read back.
            raise LimitError(
                f"struct {readas.key[:80]} nests inline types deeper than {deepest} levels, "
                "the most treexchange reads back"
            )
        if compound.size == 0:
            raise UnsupportedError(f"struct {readas.key} has no stored fields but is not a ghost")
        described = enc.datatype_size(compound)
        if described > 0xFFFF:
            # HDF5 describes a datatype in one header message of at most 65535 bytes. JLD2.jl
            # hits the same wall (an InexactError in its commit, JLD2.jl issues #343 and #487,
            # "wontfix"), so no Julia-readable encoding exists: refuse with what to change.
            raise WriteError(
                f"{readas.name.rpartition('.')[2] or 'struct'} with {len(writeas.fields)} fields: its HDF5 "
                f"datatype would take {described} bytes, over the 65535 bytes HDF5 (and JLD2.jl) allow "
                "for one type description; JLD2.jl cannot write it either. Split it into nested "
                "NamedTuples, or save a treexchange.JuliaDict (a Julia Dict) instead"
            )
        if not nondefault:
            return self.commit(compound, writeas, readas)
        if old_style:
            n = len(field_types)
            return self.commit(
                compound,
                writeas,
                readas,
                [
                    _Attr(
                        "field_datatypes",
                        self._versioned(enc.REFERENCE),
                        enc.DS_SIMPLE,
                        (n,),
                        8 * n,
                        lambda: b"".join(_ref(t) for t in field_types),
                    )
                ],
            )
        names_bytes = [n.encode("utf-8") for n in field_names]
        n = len(field_names)
        return self.commit(
            compound,
            writeas,
            readas,
            [
                _Attr(
                    "field_names",
                    enc.VLEN_UTF8,
                    enc.DS_SIMPLE,
                    (n,),
                    16 * n,
                    lambda: b"".join(self.store_vlen(b) for b in names_bytes),
                ),
                _Attr(
                    "field_types",
                    enc.REFERENCE,
                    enc.DS_SIMPLE,
                    (n,),
                    8 * n,
                    lambda: b"".join(_ref(t) for t in field_types),
                ),
            ],
        )

    def _versioned(self, t: H5Type) -> H5Type:
        """``t`` as this file's datatype messages say it (version 0 for JLD2 0.4.51 - 0.4.52)."""
        return _version_zero(t) if self.format.datatype_version_zero else t

    @staticmethod
    def _empty_attr() -> _Attr:
        return _Attr("empty", enc.fixed_type(1, False), enc.DS_SCALAR, (), 1, lambda: b"\x01")

    # ================================================================================ h5 types
    def h5fieldtype(self, w: JT, r: JT, initialized: bool) -> H5Type | Committed | None:
        """JLD2's ``h5fieldtype``: the HDF5 type of a field declared ``r`` (written as ``w``);
        ``None`` for ghosts; a :class:`Committed` when the type is committed."""
        cat = w.cat
        if cat is Cat.ARRAY:
            if r is w:
                return enc.REFERENCE
            return self.lookup(r) or self.commit(enc.REFERENCE, w, r)
        # The one storage decision for this type (field_kind): the datatype written here is the
        # one every encoded value follows, by construction.
        kind = self.field_kind(w, initialized)
        if kind == "none":
            return None
        if kind == "ref":
            # Abstract types, unions, types known only by name, mutable or large structs.
            return enc.REFERENCE
        if kind == "datatype":
            return self.bootstrap()
        if kind == "vlen":
            if cat is Cat.STRING and r is w:
                return enc.VLEN_UTF8
            return self.lookup(r) or self.commit(enc.VLEN_UTF8, w, r)
        if cat is Cat.PRIM:
            if w.h5 is None:
                raise WriteError(f"number type {w.key} has no HDF5 type")
            if self.format.bool_opaque and w is self.types.BOOL:
                # JLD2 before v0.3.3 (a4deccc) gave Bool no HDF5 type of its own: a primitive
                # bits type like any other, a committed 1-byte opaque type.
                return self.lookup(w) or self.commit(enc.opaque_type(1), w, r)
            if r is w:
                return w.h5
            return self.lookup(r) or self.commit(w.h5, w, r)
        found = self.lookup(w)
        if found is not None:
            return found
        if cat is Cat.BITS:
            return self.commit(enc.opaque_type(w.nbytes), w, r)
        return self.commit_compound(w, r)

    def h5type(self, jt: JT) -> H5Type | Committed:
        """JLD2's ``h5type`` for a stand-alone (dataset) value of type ``jt``."""
        w = jt.writeas
        if w.cat is Cat.ARRAY:
            if w is not jt:
                return _stored(self.h5fieldtype(w, jt, True), jt)
            e = _eltype(jt)
            if not e.writeas.hasfielddata:
                return self._h5type_generic(e)
            return _stored(self.h5fieldtype(e.writeas, e, False), e)
        if w.cat in (Cat.SYMBOL, Cat.PRIM, Cat.DATATYPE, Cat.STRING):
            # (A top-level String is a fixed-length string dataset: write_dataset does it.)
            return _stored(self.h5fieldtype(w, jt, True), jt)
        return self._h5type_generic(jt)

    def _h5type_generic(self, jt: JT) -> Committed:
        found = self.lookup(jt)
        if found is not None:
            return found
        w = jt.writeas
        if not w.hasdata:
            return self.commit(enc.opaque_type(1), w, jt, [self._empty_attr()])
        if w.cat is Cat.BITS:
            return self.commit(enc.opaque_type(w.nbytes), w, jt)
        if w.cat is Cat.OTHER:
            raise UnsupportedError(f"cannot write a value of type {jt.key}: its layout is unknown")
        return self.commit_compound(w, jt)

    # ================================================================================ ODR
    def field_kind(self, w: JT, initialized: bool) -> str:
        """JLD2's ``fieldodr`` for a field written as ``w``: ``none`` (ghost), ``inline``,
        ``ref`` (8-byte reference), ``vlen`` (16-byte vlen string) or ``datatype`` (32 bytes).

        Decided once per type and kept (``JT._kind_init`` / ``_kind_uninit``): a type known by
        name only is stored as a reference, and stays so for this file even once a value shows
        its layout, so headers, committed types and encoded bytes always agree."""
        frozen = w._kind_init if initialized else w._kind_uninit
        if frozen is not None:
            return frozen
        kind = self._decide_kind(w, initialized)
        if initialized:
            w._kind_init = kind
        else:
            w._kind_uninit = kind
        return kind

    @staticmethod
    def _decide_kind(w: JT, initialized: bool) -> str:
        cat = w.cat
        if cat in (Cat.STRING, Cat.SYMBOL):
            return "vlen"
        if cat in (Cat.ARRAY, Cat.ANY, Cat.OTHER, Cat.UNION):
            return "ref"
        if cat is Cat.DATATYPE:
            return "datatype"
        if not w.hasfielddata:
            return "none"
        if w.sizeof <= MAX_INLINE_SIZE and (w.isbits or (not w.mutable and initialized)):
            return "inline"
        return "ref"

    def field_size(self, ty: JT, initialized: bool) -> int:
        kind = self.field_kind(ty.writeas, initialized)
        if kind == "inline":
            return self.inline_size(ty.writeas)
        return {"none": 0, "ref": 8, "vlen": 16, "datatype": 32}[kind]

    def inline_size(self, w: JT) -> int:
        """Packed on-disk size of an inline value of type ``w`` (JLD2's ``odr_sizeof(odr(T))``)."""
        if w.cat in (Cat.PRIM, Cat.BITS):
            return w.nbytes
        size = self._inline_sizes.get(w.key)
        if size is None:
            size = sum(self.field_size(ft, True) for _, ft in w.fields)
            self._inline_sizes[w.key] = size
        return size

    # ================================================================================ values
    def _track_key(self, value: Any, jt: JT) -> Hashable | None:
        """JLD2 tracks mutable objects by ``objectid``: arrays, dicts, mutable structs by
        identity (one object written twice is one dataset, cycles close on it); Strings and
        Symbols by content (Julia's objectid hashes their bytes). Immutable structs are not
        tracked: JLD2 writes each occurrence again."""
        if isinstance(value, Symbol):
            return ("Symbol", str(value))
        if isinstance(value, JuliaType):
            return ("DataType", self.types.of_type(value).key)
        if jt.cat is Cat.DATATYPE and isinstance(value, Singleton):
            return ("DataType", self._as_type(value, ()).key)
        if isinstance(value, str):
            return ("String", value)
        if jt.mutable or isinstance(value, (JuliaArray, np.ndarray, list, dict)):
            self._keepalive.append(value)
            return ("id", id(value))
        if type(value) is Singleton and jt.cat is Cat.STRUCT and not jt.writeas.hasdata:
            # A zero-size struct written as a dataset: mutable (PyCall's PyObject) or not, the
            # file shows which by how many objects it holds (the reader gives one per dataset).
            self._keepalive.append(value)
            return ("id", id(value))
        return None

    def write_ref(self, value: Any, ws: dict[Hashable, int], path: tuple[PathSegment, ...]) -> int:
        """JLD2's ``write_ref``: the value as its own dataset; returns its relative address."""
        if type(value) is np.ndarray:
            plan = self._ref_plans.get((value.dtype, value.shape))
            if plan is not None:
                return self._write_ndarray_ref(value, plan, ws, path)
            jt = self.types.of_value(value, path)
            rel = self.write_dataset(value, jt, ws, path)
            self._plan_ndarray_ref(value, jt)
            return rel
        jt = value.jt if isinstance(value, _PairValue) else self.types.of_value(value, path)
        return self.write_dataset(value, jt, ws, path)

    def _plan_ndarray_ref(self, value: np.ndarray, jt: JT) -> None:
        """After a numpy array was written by reference: when it took the small-array path of
        :meth:`_write_object` (format 0.2.0, uncompressed, at most ``SMALL_PAYLOAD`` bytes, no
        attributes), keep what that path needs for every array of its dtype and shape, so the
        next ones skip the dataset machinery (:meth:`_write_ndarray_ref`). The type of a
        referenced array depends on its dtype and rank only (``TypeFactory.of_value``)."""
        plan = self._array_plans.get((id(jt), value.dtype, value.shape))
        if plan is None or plan[0] is not jt or len(self._ref_plans) >= _MESSAGES_KEPT:
            return
        _, space, dtype, datasz = plan
        if self.format is not _FORMATS["0.2.0"] or self.compress is not None or space.attrs:
            return
        if not 0 < datasz <= SMALL_PAYLOAD:
            return
        head, size = self._small_head(self._space_message(space), self._dtype_message(dtype))
        self._ref_plans[(value.dtype, value.shape)] = (head, size, datasz)

    def _write_ndarray_ref(
        self,
        value: np.ndarray,
        plan: tuple[bytes, int, int],
        ws: dict[Hashable, int],
        path: tuple[PathSegment, ...],
    ) -> int:
        """``write_dataset`` of a numpy array of a planned dtype and shape (:meth:`_plan_ndarray_ref`):
        tracked by identity like every array (:meth:`_track_key`), written by
        :meth:`_write_small_array`."""
        tk = ("id", id(value))
        found = ws.get(tk)
        if found is not None:
            return found
        self._keepalive.append(value)
        head, size, datasz = plan
        return self._write_small_array(head, size, value, datasz, ws, tk, path)

    def write_dataset(
        self, value: Any, jt: JT, ws: dict[Hashable, int], path: tuple[PathSegment, ...]
    ) -> int:
        """JLD2's ``write_dataset(f, x, wsession)``."""
        if type(value) is Closure and value.captures:
            value = closure_as_struct(value, path)  # (what it is in Julia: see encode_value)
        tk = None if type(value) is _PairValue else self._track_key(value, jt)  # (a Pair: immutable)
        if tk is not None:
            found = ws.get(tk)
            if found is not None:
                return found
        w = jt.writeas
        if w.cat is Cat.STRING and w is not jt:
            # A struct written as a String (BigInt): a scalar of its committed vlen string type.
            value = written_text(value)
        plan = self._compact_plans.get(id(jt))
        if plan is not None and plan[0] is jt:
            return self._write_compact(plan, value, ws, tk, path)
        if w.cat is Cat.STRING and w is not jt:
            plan = self._plan_compact(jt, self.h5type(jt), self.field_size(w, True))
            return self._write_compact(plan, value, ws, tk, path)
        if w.cat is Cat.STRING and w is jt:
            raw = _utf8(value, path)
            space = _Space(enc.DS_SCALAR, (), [])
            return self._write_object(
                space, enc.fixed_string_type(len(raw)), _Data(len(raw), encode=lambda: raw), ws, tk, path
            )
        if jt.cat is Cat.ARRAY:
            return self._write_array(value, jt, ws, tk, path)
        if jt.cat is Cat.DATATYPE and isinstance(value, (Singleton, JuliaType)):
            t = self._as_type(value, path)
            if t.cat is Cat.UNION:
                return self.write_union_dataset(t, ws)  # a Union is a Core.Union value, no DataType
        if w is not jt and (jt.cat is Cat.DICT or w.cat is not Cat.STRUCT):
            return self._write_custom(value, jt, ws, tk, path)
        # odr(T): ghost -> nothing (null dataspace); else the packed representation.
        if not w.hasdata:
            dtype = self.h5type(jt)
            return self._write_object(_Space(enc.DS_NULL, (), []), dtype, _NO_DATA, ws, tk, path)
        size = self.inline_size(w) if w.cat in (Cat.PRIM, Cat.BITS, Cat.STRUCT) else self.field_size(w, True)
        dtype = self.h5type(jt)
        # JLD2's h5convert! for UnionAllODR writes var and body in the file's datatype session,
        # whatever session the UnionAll itself is written in (a type attribute's fresh one).
        fws = self.datatype_wsession if jt.name == "Core.UnionAll" and jt.cat is Cat.STRUCT else ws
        # (A UnionAll is never planned: its session depends on the one it is written in.)
        if (
            jt.name != "Core.UnionAll"
            and jt.cat is not Cat.DATATYPE
            and 0 < size < self.format.scalar_compact_limit
        ):
            plan = self._plan_compact(jt, dtype, size)
            return self._write_compact(plan, value, ws, tk, path)
        data = _Data.of_encoder(size, lambda: self.encode_value(w, value, fws, path))
        return self._write_object(_SCALAR, dtype, data, ws, tk, path)

    def _plan_compact(
        self, jt: JT, dtype: H5Type | Committed, size: int
    ) -> tuple[JT, bytes, int, int, bytes]:
        """What :meth:`_write_object` makes of a scalar value of type ``jt`` stored in its header
        (compact layout, no attributes): every such header is the same bytes up to the value's
        ``size`` bytes, then the same tail. Kept per type (a Dict writes one Pair per entry).
        Types whose writing depends on the value (DataType values) or on the session (UnionAll,
        whose var and body go to the datatype session) are never planned."""
        plan = self._compact_template(jt, dtype, size)
        if len(self._compact_plans) < _MESSAGES_KEPT:
            self._compact_plans[id(jt)] = plan
        return plan

    def _compact_template(
        self, jt: JT, dtype: H5Type | Committed, size: int
    ) -> tuple[JT, bytes, int, int, bytes]:
        """The template of :meth:`_plan_compact`: ``(jt, header head, header size with its
        checksum, value size, tail)``."""
        tail = enc.CONTINUATION_PLACEHOLDER if self.format.continuation_placeholder else b""
        messages = enc.FILL_VALUE_MESSAGE + self._space_message(_SCALAR) + self._dtype_message(dtype)
        header = enc.object_header_unsummed(messages + enc.layout_compact(bytes(size)) + tail)
        return (jt, header[: len(header) - size - len(tail)], len(header) + 4, size, tail)

    def _write_compact(
        self,
        plan: tuple[JT, bytes, int, int, bytes],
        value: Any,
        ws: dict[Hashable, int],
        tk: Hashable | None,
        path: tuple[PathSegment, ...],
    ) -> int:
        """:meth:`_write_object` of a scalar value stored in its header, from its plan
        (:meth:`_plan_compact`): the header is reserved, the value encoded (writing what it
        references behind the header), then the header put."""
        jt, head, size, datasz, tail = plan
        header_offset = self.end
        self.end += size
        rel = header_offset - BASE
        if tk is not None:
            ws[tk] = rel
        raw = self.encode_value(jt.writeas, value, ws, path)
        if len(raw) != datasz:
            raise WriteError(f"compact data is {len(raw)} bytes, its datatype takes {datasz}", path=path)
        self.sink.put_checksummed(header_offset, head + raw + tail)
        return rel

    def _write_custom(
        self, value: Any, jt: JT, ws: dict[Hashable, int], tk: Hashable | None, path: tuple[PathSegment, ...]
    ) -> int:
        w = jt.writeas
        if jt.cat is Cat.DICT:
            # A reference to the Dict's pairs: in a JLD2.SerializedDict, or (JLD2 < v0.4.42) the
            # committed Dict type is a reference type itself.
            dtype = self.h5type(jt)
            found = self._dict_plans.get(id(jt))
            if self.format is _FORMATS["0.2.0"] and (found is None or found[0] is not jt):
                if len(self._dict_plans) < _MESSAGES_KEPT:  # (the next ones: dict_plan)
                    self._dict_plans[id(jt)] = self._compact_template(jt, dtype, 8)
            data = _Data(8, encode=lambda: _ref(self._write_kvvec(value, jt, ws, path)))
            return self._write_object(_Space(enc.DS_SCALAR, (), []), dtype, data, ws, tk, path)
        if w.cat is Cat.ARRAY:
            # NTuple{N,T} with N > 10: a reference to the tuple collected into a Vector{T}.
            dtype = self.h5type(jt)
            converted = list(value)
            vec_jt = w

            def encode() -> bytes:
                return _ref(self._write_converted_vector(converted, vec_jt, ws, path))

            return self._write_object(
                _Space(enc.DS_SCALAR, (), []), dtype, _Data(8, encode=encode), ws, tk, path
            )
        raise UnsupportedError(f"custom serialization of {jt.key} is not supported")

    def dict_plan(self, jt: JT, n: int) -> tuple[tuple[JT, bytes, int, int, bytes], JT, bytes, int] | None:
        """What writing a Dict of type ``jt`` with ``n`` entries makes beside its Pairs, for
        :mod:`._writer_dicts` to lay out many at once: the template of the Dict's header (a
        compact scalar holding the reference to its Pair vector, :meth:`_write_custom`), the
        Pair type, and the head and size of the Pair vector's header (a contiguous array of
        references with a ``julia_type`` attribute, :meth:`_write_array`). None until a Dict of
        this type was written one by one in format 0.2.0 (its Pair type's DataType dataset then
        exists: taking the plan writes nothing)."""
        plan = self._dict_plans.get(id(jt))
        if plan is None or plan[0] is not jt or n < 1 or jt.cat is not Cat.DICT:
            return None
        k, v = jt.params
        pair = self.types.pair_of(k, v)
        if (
            pair.cat is Cat.UNION
            or _where_value(pair) is not None
            or self.field_kind(pair.writeas, False) != "ref"
        ):
            return None
        ref = self.datatype_wsession.get(("DataType", pair.key))
        if ref is None:
            return None
        vec = self.types.array_of(pair, 1)
        attr = _Attr("julia_type", enc.REFERENCE, enc.DS_SCALAR, (), 8, lambda: _ref(ref))
        space = self._space_message(_Space(enc.DS_SIMPLE, (n,), [attr]))
        head, size = self._small_head(space + attr.message(), self._dtype_message(self.h5type(vec)))
        return plan, pair, head, size

    def _write_converted_vector(
        self, items: list[Any], vec_jt: JT, ws: dict[Hashable, int], path: tuple[PathSegment, ...]
    ) -> int:
        e = _eltype(vec_jt)
        if e.cat is Cat.PRIM and e.dtype is not None:
            arr = _numeric_vector(items, e)
            return self._write_array(arr, vec_jt, ws, None, path)
        # Element types numpy lacks (Int128, UInt128) or that are not numbers: encoded one by
        # one, as the elements of a list (vec_jt rules their type; no object array is made of
        # what may be 100,000 layers).
        return self._write_array(list(items), vec_jt, ws, None, path)

    def _write_kvvec(
        self, value: dict[Any, Any], jt: JT, ws: dict[Hashable, int], path: tuple[PathSegment, ...]
    ) -> int:
        k, v = jt.params
        pair = self.types.pair_of(k, v)
        vec = self.types.array_of(pair, 1)
        keys, values = _dict_entries(value, path)
        return self._write_array(_PairVector(keys, values, pair), vec, ws, None, path)

    # --- arrays ------------------------------------------------------------------------------------
    def _write_array(
        self, value: Any, jt: JT, ws: dict[Hashable, int], tk: Hashable | None, path: tuple[PathSegment, ...]
    ) -> int:
        if type(value) is np.ndarray:
            # A model's arrays come in a few shapes and types: what the code below decides for
            # one (dataspace, datatype, size) holds for every array of the same type and shape.
            plan = self._array_plans.get((id(jt), value.dtype, value.shape))
            if plan is not None and plan[0] is jt:
                _, space, dtype, datasz = plan
                data = _Data.of_array(datasz, value, self.compress is not None and datasz > 0)
                return self._write_object(space, dtype, data, ws, tk, path)
        e = _eltype(jt)
        ew = e.writeas
        shape = _julia_shape(value)
        ndims = len(shape)
        kind = self.field_kind(ew, False)
        hdims = tuple(reversed(shape)) if ndims else (1,)
        zero_d = ndims == 0
        # WriteDataspace (written before h5type, as JLD2 evaluates it first).
        if kind == "none":
            if zero_d:
                raise UnsupportedError(
                    "0-dimensional arrays of zero-size elements are not supported", path=path
                )
            self._check_ghost_elements(value, e, path)
            dims_data = b"".join(struct.pack("<q", d) for d in hdims)
            attrs = [
                _Attr(
                    "dimensions",
                    enc.fixed_type(8, True),
                    enc.DS_SIMPLE,
                    (ndims,),
                    8 * ndims,
                    lambda: dims_data,
                )
            ]
            space = _Space(enc.DS_NULL, (), attrs)
        else:
            attrs = []
            # WriteDataspace passes custom serialization through to its inner ODR, so arrays of
            # Dicts are reference arrays with a julia_type attribute too.
            if kind == "ref":
                eltype_ref = self.write_type_dataset(e, self.datatype_wsession)
                attrs.append(
                    _Attr("julia_type", enc.REFERENCE, enc.DS_SCALAR, (), 8, lambda: _ref(eltype_ref))
                )
            if zero_d:
                attrs.append(
                    _Attr("dimensions", enc.fixed_type(8, True), enc.DS_SIMPLE, (0,), 0, lambda: b"")
                )
            space = _Space(enc.DS_SIMPLE, hdims, attrs)
        dtype = self.h5type(jt)
        elsize = 0 if kind == "none" else self.field_size(e, False)
        datasz = elsize * space.numel
        if kind == "inline" and e is ew and _is_numeric_array(value):
            arr = np.asarray(value)
            if little_endian(arr.dtype).itemsize != elsize:
                raise ConversionError(f"array element size {arr.dtype.itemsize} != {elsize}", path=path)
            chunkable = self.compress is not None and datasz > 0
            if type(value) is np.ndarray and arr is value and not space.attrs:
                if len(self._array_plans) < _MESSAGES_KEPT:
                    self._array_plans[(id(jt), value.dtype, value.shape)] = (jt, space, dtype, datasz)
            return self._write_object(space, dtype, _Data.of_array(datasz, arr, chunkable), ws, tk, path)
        items = _array_items(value)

        def encode() -> bytes:
            if kind == "ref" and worth_bulk(items):  # a Dict's Pairs, a model's layers
                raw = encode_refs(self, e, items, ws, path)
                if len(raw) != elsize * len(items):
                    raise WriteError(f"references encode to {len(raw)} bytes, not {elsize} each", path=path)
                return raw
            parts = []
            for i, item in enumerate(items, 1):
                raw = self.encode_field(e, item, False, ws, (*path, i))
                if len(raw) != elsize:
                    # Never written: the datatype above says every element takes elsize bytes.
                    raise WriteError(
                        f"element encodes to {len(raw)} bytes, its element type {e.key[:80]} "
                        f"takes {elsize} ({kind})",
                        path=(*path, i),
                    )
                parts.append(raw)
            return b"".join(parts)

        chunkable = self.compress is not None and datasz > 0 and e.isbits and kind == "inline"
        if chunkable:
            # Elements held as Python objects (a JuliaArray or list of bits structs, bfloat16,
            # Int128 ...) are encoded whole before chunking: unlike numpy input, they already
            # take several times their encoded size in memory, so this copy does not change
            # the order of the memory used.
            raw = encode()
            arr = np.frombuffer(raw, dtype=np.dtype(f"V{elsize}")).reshape(shape, order="F")
            data = _Data(datasz, array=arr, is_array=True, chunkable=True)
            return self._write_object(space, dtype, data, ws, tk, path)
        return self._write_object(space, dtype, _Data(datasz, encode=encode, is_array=True), ws, tk, path)

    def _check_ghost_elements(self, value: Any, e: JT, path: tuple[PathSegment, ...]) -> None:
        """That every element of an array whose element type ``e`` stores no data (``Nothing``,
        ``Tuple{}``, a struct without stored fields) is of that type: none is written, so another
        value would be lost without a word (``JuliaArray("Core.Nothing", [None, 0])`` read back
        as two ``nothing``). A struct element made in Python is typed here, which also runs the
        check of its fields against the type another instance fixed (``_check_ghost_fields``)."""
        for i, item in enumerate(_array_items(value), 1):
            found = self.types.of_value(item, (*path, i))
            if found is not e and found.key != e.key:
                raise ConversionError(
                    f"found a {shown_type(found)} in an array of {shown_type(e)}, which stores no data "
                    "(it would be lost): give the array the element type of its elements",
                    path=(*path, i),
                )

    # --- the dataset header -----------------------------------------------------------------------
    def _write_object(
        self,
        space: _Space,
        dtype: H5Type | Committed,
        data: _Data,
        ws: dict[Hashable, int],
        tk: Hashable | None,
        path: tuple[PathSegment, ...] = (),
    ) -> int:
        """The second ``write_dataset`` method of JLD2: header, layout choice, data."""
        datasz, array = data.size, data.array
        space_message, dtype_message = self._space_message(space), self._dtype_message(dtype)
        fmt = self.format
        if (
            fmt is _FORMATS["0.2.0"]  # the fast path makes 0.2.0's layout (aligned, with the NIL message)
            and array is not None
            and 0 < datasz <= SMALL_PAYLOAD
            and data.is_array
            and not data.chunkable
            and not space.attrs
        ):
            small_head, size = self._small_head(space_message, dtype_message)
            return self._write_small_array(small_head, size, array, datasz, ws, tk, path)
        psz = len(enc.FILL_VALUE_MESSAGE) + len(space_message) + len(dtype_message)
        psz += sum(a.message_size for a in space.attrs)
        if fmt.continuation_placeholder:
            psz += enc.CONTINUATION_PLACEHOLDER_SIZE
        if datasz < (fmt.array_compact_limit if data.is_array else fmt.scalar_compact_limit):
            layout = "compact"
            psz += 4 + 4 + datasz
        elif data.chunkable:
            array, compress = _need(array, "array"), _need(self.compress, "compression")
            itemsize = datasz // max(space.numel, 1)
            shape = array.shape if array.ndim else (1,)
            # JLD2's own form: the whole array one chunk, dimension sizes 8 bytes wide.
            chunk = (
                tuple(shape)
                if compress.jld2_form
                else plan_chunk(tuple(shape), itemsize, compress.chunk_bytes)
            )
            chunk_h5 = (*reversed(chunk), itemsize)
            pipeline = enc.filter_pipeline(compress.filters(itemsize))
            psz += len(pipeline)
            # One chunk: JLD2's own single-chunk layout (v4) with libhdf5's dimension width;
            # JLD2 reads widths of 1, 2, 4 or 8 bytes only, else use the B-tree layout (v3).
            width = 8 if compress.jld2_form else enc.chunk_dim_width(chunk_h5)
            if chunk == tuple(shape) and width in (1, 2, 4, 8):
                layout = "single"
                psz += enc.layout_single_chunk_size(len(chunk_h5), width)
            else:
                layout = "chunked"
                psz += enc.layout_chunked_v3_size(len(chunk_h5))
        else:
            layout = "contiguous"
            psz += enc.LAYOUT_CONTIGUOUS_SIZE
        header_offset = self.end
        self.end += enc.object_header_size(psz)
        rel = header_offset - BASE
        if tk is not None:
            ws[tk] = rel
        head = [enc.FILL_VALUE_MESSAGE, space_message]
        head += [a.message() for a in space.attrs]
        head.append(dtype_message)
        if layout == "compact":
            raw = b"" if datasz == 0 else data.materialize()
            if len(raw) != datasz:
                raise WriteError(f"compact data is {len(raw)} bytes, its datatype takes {datasz}", path=path)
            head.append(enc.layout_compact(raw))
        elif layout == "single":
            (c,) = compressed_chunks(_need(array, "array"), chunk, _need(self.compress, "compression"))
            address = self.end  # right after the header, as JLD2 places it
            self.sink.put_large(address, c.data)
            self.end += len(c.data)
            head.append(pipeline)
            head.append(enc.layout_single_chunk(chunk_h5, len(c.data), address - BASE, width))
        elif layout == "chunked":
            btree = self._write_chunks(_need(array, "array"), chunk, chunk_h5)
            head.append(pipeline)
            head.append(enc.layout_chunked_v3(btree, chunk_h5))
        else:
            header_end = self.end
            data_address = _align8(header_end) if fmt.align_contiguous else header_end
            head.append(enc.layout_contiguous(data_address - BASE, datasz))
            self.end = data_address + datasz
            if array is not None and datasz > SMALL_PAYLOAD:
                # Transposed (C-ordered input) block by block, written by the sink's writer thread.
                pos = data_address + self.sink.put_array(data_address, array)
                if pos != data_address + datasz:
                    raise WriteError(
                        f"array payload is {pos - data_address} bytes, its datatype takes {datasz}", path=path
                    )
            else:
                # Small payloads join the buffered metadata (one write for many small arrays).
                raw = data.materialize()
                if len(raw) != datasz:
                    raise WriteError(
                        f"contiguous data is {len(raw)} bytes, its datatype takes {datasz}", path=path
                    )
                if datasz > SMALL_PAYLOAD:
                    self.sink.put_large(data_address, raw)
                else:
                    # With its alignment padding: touching the header, so both go in one write.
                    self.sink.put(header_end, bytes(data_address - header_end) + raw)
        if fmt.continuation_placeholder:
            head.append(enc.CONTINUATION_PLACEHOLDER)
        header = enc.object_header_unsummed(b"".join(head))  # the sink appends the checksum
        if len(header) + 4 != enc.object_header_size(psz):
            raise WriteError("object header size mismatch", path=path)
        self.sink.put_checksummed(header_offset, header)
        return rel

    def _small_head(self, space_message: bytes, dtype_message: bytes) -> tuple[bytes, int]:
        """The bytes every small-array header of one dataspace and datatype starts with, and the
        header's size (see :meth:`_write_small_array`); made once per pair of messages."""
        key = (space_message, dtype_message)
        found = self._small_heads.get(key)
        if found is None:
            psz = len(enc.FILL_VALUE_MESSAGE) + len(space_message) + len(dtype_message)
            psz += enc.CONTINUATION_PLACEHOLDER_SIZE + enc.LAYOUT_CONTIGUOUS_SIZE
            messages = enc.FILL_VALUE_MESSAGE + space_message + dtype_message
            rest = psz - len(messages)  # the layout message and the placeholder: per header
            head = enc.object_header_unsummed(messages + bytes(rest))[:-rest]
            found = (head, enc.object_header_size(psz))
            if len(self._small_heads) < _MESSAGES_KEPT:
                self._small_heads[key] = found
        return found

    def _write_small_array(
        self,
        head: bytes,
        size: int,
        array: np.ndarray,
        datasz: int,
        ws: dict[Hashable, int],
        tk: Hashable | None,
        path: tuple[PathSegment, ...],
    ) -> int:
        """:meth:`_write_object` for an array of at most ``SMALL_PAYLOAD`` bytes with no
        attributes, uncompressed -- the contiguous layout with the data buffered with the
        metadata -- made the same way, byte for byte, in fewer steps: every header of one
        dataspace and datatype starts with the same bytes ``head`` (:meth:`_small_head`) and
        differs only in the data address of its layout message."""
        header_offset = self.end
        header_end = header_offset + size
        rel = header_offset - BASE
        if tk is not None:
            ws[tk] = rel
        data_address = header_end + -header_end % 8
        self.end = data_address + datasz
        raw: bytes | memoryview
        if array.ndim == 1 and array.flags.c_contiguous and array.dtype.byteorder in _NATIVE_LITTLE:
            try:
                raw = array.data.cast("B")  # (1-D: column-major already; copied by the sink)
            except (TypeError, ValueError):  # a dtype the buffer protocol lacks (datetime64 ...)
                raw = array.tobytes()
        else:
            raw = _array_bytes(array)
        if len(raw) != datasz:
            raise WriteError(f"contiguous data is {len(raw)} bytes, its datatype takes {datasz}", path=path)
        # (The alignment padding between header and data is a hole: it reads as zeros.)
        self.sink.put(data_address, raw)
        layout = _LAYOUT_CONTIGUOUS.pack(enc.MSG_LAYOUT, 18, 0, 4, 1, data_address - BASE, datasz)
        self.sink.put_checksummed(header_offset, head + layout + enc.CONTINUATION_PLACEHOLDER)
        return rel

    def _space_message(self, space: _Space) -> bytes:
        """The dataspace message of a dataset header; the same few shapes recur in a model, so
        their bytes are made once per file."""
        key = (space.kind, tuple(space.dims))
        found = self._messages.get(key)
        if found is None:
            found = enc.message(enc.MSG_DATASPACE, enc.dataspace_body(space.kind, space.dims))
            if len(self._messages) < _MESSAGES_KEPT:
                self._messages[key] = found
        return found

    def _dtype_message(self, dtype: H5Type | Committed) -> bytes:
        """The datatype message of a dataset header: a shared reference to a committed type, or
        the type itself (made once per type object: the writer hands out the same few)."""
        committed = isinstance(dtype, Committed)
        key: Hashable = ("committed", dtype.offset) if committed else ("type", id(dtype))  # type: ignore[union-attr]
        found = self._messages.get(key)
        if found is not None and (committed or self._message_types.get(key) is dtype):
            return found
        if committed:
            found = enc.message(enc.MSG_DATATYPE, enc.encode_shared_datatype(dtype.offset), 3)  # type: ignore[union-attr]
        else:
            found = enc.message(enc.MSG_DATATYPE, enc.encode_datatype(self._versioned(dtype)), 1)  # type: ignore[arg-type]
        if len(self._messages) < _MESSAGES_KEPT or key in self._messages:
            self._messages[key] = found
            if not committed:
                self._message_types[key] = dtype  # type: ignore[assignment]  # kept: its id stays unique
        return found

    def _write_chunks(self, arr: np.ndarray, chunk: tuple[int, ...], chunk_h5: tuple[int, ...]) -> int:
        """Compressed chunks, then the v1 B-tree indexing them; returns the B-tree's address."""
        compress = _need(self.compress, "compression")
        nd1 = len(chunk_h5)
        records: list[tuple[tuple[int, int, tuple[int, ...]], int]] = []
        pos = _align8(self.end)
        for c in compressed_chunks(arr, chunk, compress):
            self.sink.put_large(pos, c.data)
            records.append(((len(c.data), 0, c.offsets), pos - BASE))
            pos += len(c.data)
        self.end = pos
        # Right key after the last chunk: its offset plus the chunk dims, in every dimension.
        last = records[-1][0][2]
        right = (0, 0, tuple(o + d for o, d in zip(last, chunk_h5)))
        level = 0
        nodes = records
        while True:
            groups = [
                nodes[i : i + 2 * enc.BTREE_CHUNK_K] for i in range(0, len(nodes), 2 * enc.BTREE_CHUNK_K)
            ]
            parents: list[tuple[tuple[int, int, tuple[int, ...]], int]] = []
            for gi, grp in enumerate(groups):
                keys = [k for k, _ in grp]
                keys.append(groups[gi + 1][0][0] if gi + 1 < len(groups) else right)
                address = self.end
                self.end += enc.btree_node_size(nd1)
                self.sink.put(address, enc.btree_node(level, keys, [c for _, c in grp], nd1))
                parents.append((grp[0][0], address - BASE))
            if len(parents) == 1:
                return parents[0][1]
            nodes = parents
            level += 1

    # ================================================================================ encoding
    def encode_field(
        self, ty: JT, value: Any, initialized: bool, ws: dict[Hashable, int], path: tuple[PathSegment, ...]
    ) -> bytes:
        """JLD2's ``h5convert!`` for one field / array element declared ``ty``."""
        w = ty.writeas
        kind = self.field_kind(w, initialized)
        if value is UNDEF:
            return self._undefined(w, kind, path)
        if kind == "none":
            return b""
        if value is _ZERO:
            return bytes(self.field_size(ty, initialized))
        if w is not ty:
            if kind == "ref":
                if w.cat is Cat.ARRAY:
                    if ty.cat is Cat.DICT:
                        # (JLD2 < v0.4.42) a field declared Dict refers to its Vector{Pair}:
                        # h5convert! converts before writing a reference to an Array.
                        return _ref(self._write_kvvec(value, ty, ws, path))
                    return _ref(self._write_converted_vector(list(value), w, ws, path))
                return _ref(self.write_ref(value, ws, path))
            if w.cat is Cat.STRING:
                value = written_text(value)  # a struct written as a String: its text
            return self.encode_value(w, value, ws, path)
        if kind == "ref":
            return _ref(self.write_ref(value, ws, path))
        if kind == "vlen":
            if not isinstance(value, str):
                raise ConversionError(
                    f"expected a {'Symbol' if w.cat is Cat.SYMBOL else 'String'}, "
                    f"found {type(value).__name__}",
                    path=path,
                )
            return self.store_vlen(_utf8(value, path))
        if kind == "datatype":
            return self.encode_datatype_value(self._as_type(value, path), ws)
        return self.encode_value(w, value, ws, path)

    @staticmethod
    def _undefined(w: JT, kind: str, path: tuple[PathSegment, ...]) -> bytes:
        """An unassigned element or ``#undef`` field, as JLD2's ``h5convert_uninitialized!``
        writes it: a NULL reference (8 zero bytes) or an empty heap reference for a String /
        Symbol (16 zero bytes, read back by JLD2 as undefined). Inline values have no such form."""
        if kind == "ref":
            return bytes(8)
        if kind == "vlen":
            return bytes(16)
        raise ConversionError(
            f"#undef (treexchange.UNDEF) where a {w.key} is stored inline: only references can be undefined",
            path=path,
        )

    def encode_value(
        self, w: JT, value: Any, ws: dict[Hashable, int], path: tuple[PathSegment, ...]
    ) -> bytes:
        """The packed on-disk bytes of an inline value of type ``w``."""
        cat = w.cat
        if cat is Cat.PRIM:
            return _encode_prim(w, value, path)
        if cat is Cat.BITS:
            return _encode_bits(w, value, path)
        if cat is Cat.SYMBOL or cat is Cat.STRING:
            return self.encode_field(w, value, True, ws, path)
        if cat is Cat.STRUCT:
            if type(value) is Closure and value.captures:
                # A closure that captured values is an instance of its struct type, fields the
                # captured variables: JLD2.jl writes it as any struct, and so does this writer.
                value = closure_as_struct(value, path)
            if isinstance(value, JuliaBits) and w.layout != UNION_EL:
                # (an element of a Union array holding raw bits, an InlineStrings.String31, is
                # one member of the InlineUnionEl: _field_values places it)
                return _struct_from_bits(w, value, self.types.of_type(value.type) is w, path)
            values = self._field_values(w, value, path)
            try:
                if type(value) is JuliaStruct and value.layout is None:
                    return self._encode_made_fields(w, values, ws, path)
                return b"".join(
                    self.encode_field(ft, v, True, ws, (*path, name))
                    for (name, ft), v in zip(w.fields, values)
                )
            except ConversionError as err:
                _name_the_first_instance(err, w, value, path)
                raise
        if cat is Cat.DATATYPE:
            return self.encode_datatype_value(self._as_type(value, path), ws)
        raise UnsupportedError(f"cannot encode a {cat.value} inline", path=path)

    def _encode_made_fields(
        self, w: JT, values: list[Any], ws: dict[Hashable, int], path: tuple[PathSegment, ...]
    ) -> bytes:
        """The fields of a struct made in Python (a ``JuliaStruct`` without a layout), each of the
        type its Julia type declares: the instance typed first fixed those types
        (``TypeFactory._struct_type``), and a Julia struct has one type per field.

        A field stored by reference is checked before it is written, as the object it refers to
        is written with its own type, not the field's: JLD2.jl loads a reference field
        declared ``T`` as ``isa(x, T) ? x : rconvert(T, x)`` (src/data/writing_datatypes.jl,
        ``jlconvert(::MappedRepr{T,RelOffset}, ...)``), ``rconvert`` falling back to ``convert``
        (src/data/custom_serialization.jl), which fails for most pairs (``()`` into a
        ``Vector{Any}``) and otherwise loads a value other than the one stored (a ``Vector{Int64}``
        into a ``Vector{Float64}`` field), while treexchange reads the stored object as it is.
        Other fields are checked after they are encoded, so that the encoder's own error (a
        value that does not fit) is the one reported; what it converts without a word (a
        ``Symbol`` into a ``String`` field, a struct ``Main.A`` into a field ``Main.B`` with the
        same field names) is then refused too. Fields declared ``Any``, a ``Union`` or a type
        known by name only hold any value, by reference; ``#undef`` is the encoder's to judge."""
        parts = []
        for (name, ft), v in zip(w.fields, values):
            fpath = (*path, name)
            if v is UNDEF or ft.cat in _HOLDS_ANY:
                parts.append(self.encode_field(ft, v, True, ws, fpath))
                continue
            kind = self.field_kind(ft.writeas, True)
            if kind == "ref":
                self._check_declared(ft, v, kind, fpath)
            parts.append(self.encode_field(ft, v, True, ws, fpath))
            if kind != "ref":
                self._check_declared(ft, v, kind, fpath)
        return b"".join(parts)

    def _check_declared(self, declared: JT, value: Any, kind: str, path: tuple[PathSegment, ...]) -> None:
        """That ``value`` is of the field type ``declared`` (one interned type, or one key)."""
        if isinstance(value, np.generic) and value.dtype == declared.dtype:
            return  # a numpy number of the declared type (the commonest field: not typed again)
        found = self.types.of_value(value, path)
        if found is declared or found.key == declared.key:
            return
        found_text, declared_text = shown_type(found), shown_type(declared)
        if kind == "ref":
            why = (
                f"found a {found_text}, stored by reference: JLD2.jl would load it into the field "
                "only by convert(), which fails or changes the value"
            )
        elif kind == "none":
            why = (
                f"found a {found_text}, written as a {declared_text}, which stores no data (it would be lost)"
            )
        else:
            why = f"found a {found_text}, which would be written converted to {declared_text} (another type)"
        # (_name_the_first_instance, around the encoding of the fields, adds which type another
        # instance declared and what to do.)
        raise ConversionError(why, path=path)

    def _field_values(self, w: JT, value: Any, path: tuple[PathSegment, ...]) -> list[Any]:
        names = [n for n, _ in w.fields]
        if w.is_tuple:
            if not isinstance(value, tuple) or len(value) != len(names):
                raise ConversionError(
                    f"expected a tuple of {len(names)}, found {type(value).__name__}", path=path
                )
            return list(value)
        if w.name == "Core.NamedTuple":
            if type(value) is JlNamedTuple and list(value._data) == names:
                return list(value._data.values())
            if not isinstance(value, JlNamedTuple) or list(value) != names:
                raise ConversionError("expected a NamedTuple with fields " + ", ".join(names), path=path)
            return [value[n] for n in names]
        if isinstance(value, _PairValue):
            return [value.first, value.second]
        if w.layout == UNION_EL:
            # An element of a Union array: (mask, t1, t2) with the other member zeroed.
            t1 = w.fields[1][1]
            if self.types.of_value(value, path) is t1:
                return [np.uint8(0), value, _ZERO]
            return [np.uint8(255), _ZERO, value]
        if w.name == "Base.Complex" and not isinstance(value, JuliaStruct):
            c = complex(value)
            return [c.real, c.imag]
        if isinstance(value, JuliaStruct):
            missing = [n for n in names if n not in value.fields]
            if missing:
                raise ConversionError(f"struct {value.type} lacks field(s) {missing}", path=path)
            return [value.fields[n] for n in names]
        if isinstance(value, Singleton) or value is None:
            return []
        raise ConversionError(f"cannot store {type(value).__name__} as {w.key}", path=path)

    def _as_type(self, value: Any, path: tuple[PathSegment, ...]) -> JT:
        if isinstance(value, JT):
            return value
        if isinstance(value, JuliaType):
            return self.types.of_type(value)
        if isinstance(value, Singleton) and value.type.name == "Core.Type" and len(value.type.params) == 1:
            # The reader gives the type value T as the singleton of its type Type{T}.
            inner = value.type.params[0]
            if isinstance(inner, JuliaType):
                return self.types.of_type(inner)
        raise ConversionError(f"expected a Julia type, found {type(value).__name__}", path=path)

    # --- DataType values -----------------------------------------------------------------------------
    def encode_datatype_value(self, t: JT, ws: dict[Hashable, int]) -> bytes:
        """JLD2's ``h5convert!`` for ``DataTypeODR``: vlen name, then vlen of parameter refs."""
        name, params = self._datatype_name_params(t)
        out = self.store_vlen(name.encode("utf-8"))
        if not params:
            return out + bytes(16)
        refs = self.refs_from_types(params, ws)
        return out + self.store_vlen(b"".join(_ref(r) for r in refs), count=len(refs))

    def _datatype_name_params(self, t: JT) -> tuple[str, tuple[Any, ...]]:
        # Parameters read from a file are JuliaType text: resolve them now, when every type of
        # the value tree is known (a struct's own type may appear in its parameters' layout).
        params = tuple(
            self.types.of_type(p) if isinstance(p, JuliaType) else p
            for p in (t.raw_params if t.raw_params is not None else t.params)
        )
        if t.is_tuple and any(_is_vararg(p) for p in params):
            # Tuple{Vararg{T}}: not a Type{<:NTuple} in Julia, so JLD2 writes it by its name.
            return "Core.Tuple", params
        if t.is_tuple and not self.format.tuple_names:
            return "Core.Tuple", params  # (JLD2 < v0.4.19)
        if t.is_tuple:
            n = len(params)
            # JLD2's NTuple method applies to homogeneous tuples of a concrete type (the diagonal
            # rule); its `reduce(==, params)` test is true only for N == 2.
            # (Before v0.4.41, Type{NTuple{N,ET}} took a 1-tuple of any element type.)
            homogeneous = (
                n == 0
                or (n == 1 and self.format.ntuple_from == 1)
                or (
                    all(_same_param(p, params[0]) for p in params)
                    and (params[0].concrete if isinstance(params[0], JT) else True)
                )
            )
            if homogeneous:
                ntuple_from = self.format.ntuple_from
                if n == 2 if ntuple_from == 0 else n >= ntuple_from:
                    return "NTuple", (np.int64(n), params[0])
                return "Tuple", params
            return "Core.Tuple", params
        return t.name, params

    def refs_from_types(self, params: Sequence[Any], ws: dict[Hashable, int]) -> list[int]:
        """JLD2's ``refs_from_types``: committed types by reference, other types as DataType
        datasets, values (``2``, ``true``, a names tuple) as datasets of their own."""
        refs: list[int] = []
        committed: dict[int, int] = {}  # id(p) -> its commit (a Tuple of 10,000 alike layers)
        for p in params:
            known = committed.get(id(p))
            if known is not None:
                refs.append(known)
            elif isinstance(p, JT) and p.cat is Cat.UNION:
                refs.append(self.write_union_dataset(p, ws))  # a Union is not a DataType
            elif isinstance(p, JT) and _where_value(p) is not None:
                refs.append(self.write_ref(_where_value(p), ws, ()))  # a UnionAll is a value
            elif isinstance(p, JT) and p.cat is Cat.OTHER:
                # JLD2 refers to a committed type by its commit; one known only by name may
                # have been committed earlier in this file (e.g. Core.Union), else it is a dataset.
                found = self.lookup(p)
                refs.append(found.offset if found is not None else self.write_datatype_dataset(p, ws))
            elif isinstance(p, JT) and p.key in self.source.by_name:
                refs.append(self.write_datatype_dataset(p, ws))  # as the re-encoded file did
            elif isinstance(p, JT):
                dt = self.h5fieldtype(p.writeas, p, True)
                if isinstance(dt, Committed):
                    refs.append(dt.offset)
                    committed[id(p)] = dt.offset
                else:
                    refs.append(self.write_datatype_dataset(p, ws))
            else:
                refs.append(self.write_ref(p, ws, ()))
        return refs

    def write_type_dataset(self, t: JT, ws: dict[Hashable, int]) -> int:
        """A dataset holding the type ``t``: a ``Core.Union`` value for unions, the ``UnionAll``
        value for a ``where`` type, else a DataType."""
        if t.cat is Cat.UNION:
            return self.write_union_dataset(t, ws)
        where = _where_value(t)
        if where is not None:
            return self.write_ref(where, ws, ())
        return self.write_datatype_dataset(t, ws)

    def write_union_dataset(self, t: JT, ws: dict[Hashable, int]) -> int:
        """A scalar ``Core.Union`` dataset (JLD2's ``UnionTypeODR``): a description (for people;
        JLD2 ignores it), references to the DataType members, references to UnionAll members.
        Unions are immutable in Julia, so they are not shared between uses."""
        union_jt = self.types.lookup("Core.Union") or self.types.other(JuliaType("Core.Union"))
        dtype = self.lookup(union_jt) or self.commit(enc.H5TYPE_UNION, union_jt, union_jt)
        members = [
            self.types.of_type(p) if isinstance(p, JuliaType) else p for p in (t.raw_params or t.params)
        ]
        # What Julia printed, when re-encoding a file that has this union (see _era.Source).
        shown = self.source.union_descriptions.get(t.key)
        description = (shown if shown is not None else _union_description(t.raw_params or ())).encode("utf-8")
        datatypes = [m for m in members if isinstance(m, JT)]
        unionalls = [m for m in members if not isinstance(m, JT)]

        def encode() -> bytes:
            out = self.store_vlen(description)
            if datatypes:
                refs = self.refs_from_types(datatypes, ws)
                out += self.store_vlen(b"".join(_ref(r) for r in refs), count=len(refs))
            else:
                out += bytes(16)
            if unionalls:
                refs = [self.write_ref(u, ws, ()) for u in unionalls]
                out += self.store_vlen(b"".join(_ref(r) for r in refs), count=len(refs))
            else:
                out += bytes(16)
            return out

        return self._write_object(_Space(enc.DS_SCALAR, (), []), dtype, _Data(48, encode=encode), ws, None)

    def write_datatype_dataset(self, t: JT, ws: dict[Hashable, int]) -> int:
        """A scalar dataset whose value is the type ``t`` (``write_ref(f, T, wsession)``)."""
        tk = ("DataType", t.key)
        found = ws.get(tk)
        if found is not None:
            return found
        boot = self.bootstrap()
        data = _Data(32, encode=lambda: self.encode_datatype_value(t, ws))
        return self._write_object(_Space(enc.DS_SCALAR, (), []), boot, data, ws, tk)


# ==================================================================================== helpers


_ZERO = object()
"""The all-zero-bytes value of the unused member of a ``JLD2.InlineUnionEl``."""


def _version_zero(t: H5Type) -> H5Type:
    """``t`` with version 0 in every class byte but fixed-point ones (JLD2 0.4.51 - 0.4.52).

    Kept on the type object, as its encoding is (``encode_datatype``), not in a cache keyed by
    equality: two equal types can differ where equality does not look (``committed_at``, the
    address each was read from), and such a cache gave the second the first one's answer."""
    found: H5Type | None = t.__dict__.get("_version_zero")
    if found is None:
        members = tuple(replace(m, type=_version_zero(m.type)) for m in t.members)
        base = _version_zero(t.base) if t.base is not None else None
        version = t.version if t.cls == H5Class.FIXED else 0
        found = replace(t, version=version, members=members, base=base)
        object.__setattr__(t, "_version_zero", found)
    return found


def _type_chain(t: H5Type) -> int:
    """Datatypes on the longest chain from ``t`` down to a leaf type (a plain number: 1).

    The reader's measure, kept on each type object: a cache keyed by equality compared each
    fresh copy of a nested struct's type (the reader's, a previous save's) with the kept one
    down to the bottom at each of its levels, quadratic in the depth."""
    return 1 + _nesting(t)


def _arrays_only(layers: tuple[Any, ...]) -> bool:
    """Whether every element of ``layers`` is a NamedTuple of numpy arrays (checked in C)."""
    if len(layers) < 16 or set(map(type, layers)) != {JlNamedTuple}:
        return False
    return set(map(type, chain.from_iterable(map(dict.values, map(_DATA, layers))))) == {np.ndarray}


def _dict_entries(value: Any, path: tuple[PathSegment, ...]) -> tuple[list[Any], list[Any]]:
    """A Dict's keys and values: a dict's, or the pairs' of a Dict read in its stored form
    ``JuliaStruct(Dict{K,V}, kvvec=[Pair...])`` (keys Python cannot hash)."""
    if isinstance(value, dict):
        keys = list(value)
        if set(map(type, keys)) != {str}:  # (only keys holding a NaN can be one key in Julia)
            check_julia_keys(keys, path)
        return keys, list(value.values())
    out = []
    for i, p in enumerate(_array_items(value.fields["kvvec"]), 1):
        if isinstance(p, JuliaStruct) and set(p.fields) == {"first", "second"}:
            out.append((p.fields["first"], p.fields["second"]))
        elif isinstance(p, JlNamedTuple) and set(p) == {"first", "second"}:
            out.append((p["first"], p["second"]))
        else:
            raise ConversionError("a Dict entry is not a Pair", path=(*path, "kvvec", i))
    check_julia_keys((k for k, _ in out), path)
    return [k for k, _ in out], [v for _, v in out]


def _union_description(members: Sequence[Any]) -> str:
    """JLD2's ``string(U)`` for a Union's description (only people read it; byte identity needs
    it): Julia's ``show`` of each member, where a function's type is ``typeof(f)`` and a
    ``where`` type over all of its type's parameters, in order, is the bare name
    (``Accessors.IndexLens`` for ``IndexLens{I} where I``)."""
    return "Union{" + ", ".join(_show_member(m) for m in members) + "}"


def _show_member(p: Any) -> str:
    if isinstance(p, JuliaStruct) and p.type.name == "Core.UnionAll":
        wrapper = _wrapper_name(p)
        if wrapper is not None:
            return wrapper
    if isinstance(p, JuliaType) and not p.params:
        head, _, last = p.name.rpartition(".")
        if last.startswith("#") and len(last) > 1 and "#" not in last[1:]:
            module = "" if head in ("Core", "Base", "") else head + "."
            return f"typeof({module}{last[1:]})"
    return str(JuliaType("Core.Union", (p,)))[len("Union{") : -1]


def _wrapper_name(unionall: JuliaStruct) -> str | None:
    """The type's name when ``unionall`` is ``T{A, B} where B where A`` (its parameters exactly
    the variables of the chain, outermost first), as Julia shows such a type."""
    variables = []
    body: Any = unionall
    while isinstance(body, JuliaStruct) and body.type.name == "Core.UnionAll":
        variables.append(body.fields.get("var"))
        body = body.fields.get("body")
    if isinstance(body, Singleton) and body.type.name == "Core.Type" and len(body.type.params) == 1:
        body = body.type.params[0]
    if not isinstance(body, JuliaType) or len(body.params) != len(variables):
        return None
    if any(a is not b for a, b in zip(body.params, variables)):
        return None
    return body.short_name


def _is_vararg(p: Any) -> bool:
    """Whether a type parameter is a ``Vararg`` (``Core.TypeofVararg``) value."""
    return isinstance(p, JuliaStruct) and p.type.name == "Core.TypeofVararg"


def _where_value(t: JT) -> Any:
    """The ``UnionAll`` value of a ``where`` type (``_juliatype.where_type``), else None."""
    if t.cat is Cat.OTHER and t.name == "Core.UnionAll" and len(t.params) == 1:
        p = t.params[0]
        if isinstance(p, JuliaStruct) and p.type.name == "Core.UnionAll":
            return p
    return None


def _julia_shape(value: Any) -> tuple[int, ...]:
    if isinstance(value, (list, _PairVector)):
        return (len(value),)
    if isinstance(value, JuliaArray):
        return value.shape
    return tuple(np.shape(value))


def _is_numeric_array(value: Any) -> bool:
    return not isinstance(value, (list, JuliaArray, _PairVector))


def _array_items(value: Any) -> Sequence[Any]:
    if isinstance(value, (list, _PairVector)):
        return value
    if isinstance(value, JuliaArray):
        return value.tolist()
    arr = np.asarray(value)
    return list(arr.ravel(order="F"))


def _array_bytes(array: np.ndarray | None) -> bytes:
    return column_major_bytes(_need(array, "array"))  # small arrays only: one copy, no pieces


def _numeric_vector(items: list[Any], e: JT) -> np.ndarray:
    return np.asarray(items, dtype=_need(e.dtype, f"numpy dtype of {e.key}"))


def _same_param(a: Any, b: Any) -> bool:
    """Julia's ``==`` on two type parameters: one interned type, or equal values of one type
    (``2`` and ``2``; the values of StaticArrays' ``Tuple{2,2}``)."""
    if isinstance(a, JT) or isinstance(b, JT):
        return a is b
    return type(a) is type(b) and bool(np.all(a == b))


_T = TypeVar("_T")


def _need(value: _T | None, what: str) -> _T:
    """``value``, which the writer's own logic guarantees; a :class:`WriteError` if it is not."""
    if value is None:
        raise WriteError(f"internal inconsistency: no {what}")
    return value


def _eltype(jt: JT) -> JT:
    return _need(jt.eltype, f"element type of {jt.key}")


def _stored(dtype: H5Type | Committed | None, jt: JT) -> H5Type | Committed:
    """The HDF5 type of a stand-alone value: ghosts are handled by the callers."""
    if dtype is None:
        raise WriteError(f"internal inconsistency: no stored datatype for {jt.key}")
    return dtype


# Declared field types that hold a value of any type, by reference (abstract, or known by name).
_HOLDS_ANY = frozenset({Cat.ANY, Cat.UNION, Cat.OTHER})


def _name_the_first_instance(err: ConversionError, w: JT, value: Any, path: tuple[PathSegment, ...]) -> None:
    """Say why a field of a struct made in Python had to be of another type: a Julia struct type
    has one type per field, and another instance of it fixed that type (``tx.save`` of two
    ``JuliaStruct("Main.P", {"x": 1.0})`` / ``{"x": 2}`` values said only "expected Core.Float64")."""
    if not isinstance(value, JuliaStruct) or value.layout is not None or len(err.path) != len(path) + 1:
        return
    name = err.path[-1]
    declared = dict(w.fields).get(name) if isinstance(name, str) else None
    if declared is not None and err.path[: len(path)] == path:
        err.message += (
            f"; a Julia struct type has one type per field, and another instance of {value.type} made"
            f" {name!r} a {declared.key}: give every instance's {name!r} the same type"
        )


def _encode_prim(w: JT, value: Any, path: tuple[PathSegment, ...]) -> bytes:
    if w.nbytes == 16:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ConversionError(
                f"expected an integer for {w.name}, found {type(value).__name__}", path=path
            )
        signed = w.name == "Core.Int128"
        try:
            return int(value).to_bytes(16, "little", signed=signed)
        except OverflowError:
            raise ConversionError(f"{int(value)} does not fit {w.name}", path=path) from None
    dtype = _need(w.dtype, f"numpy dtype of {w.key}")
    if isinstance(value, np.generic):
        if value.dtype.newbyteorder("=") != dtype:
            raise ConversionError(f"expected {w.name}, found numpy {value.dtype}", path=path)
        return np.asarray(value, dtype=dtype.newbyteorder("<")).tobytes()
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.newbyteorder("=") == dtype:
        return np.asarray(value, dtype=dtype.newbyteorder("<")).tobytes()
    if dtype.kind == "b":
        if not isinstance(value, bool):
            raise ConversionError(f"expected a Bool, found {type(value).__name__}", path=path)
    elif dtype.kind in "iu":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConversionError(
                f"expected an integer for {w.name}, found {type(value).__name__}", path=path
            )
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ConversionError(f"{value} does not fit {w.name}", path=path)
    elif dtype.kind == "f":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConversionError(f"expected a number for {w.name}, found {type(value).__name__}", path=path)
    return np.asarray(value, dtype=dtype.newbyteorder("<")).tobytes()


def _struct_from_bits(w: JT, value: JuliaBits, same_type: bool, path: tuple[PathSegment, ...]) -> bytes:
    """A struct read as raw bits (its file stored the type as a primitive type of its size, as
    a ``Complex{Float32}`` can be): the bits are the struct's fields packed in order, which is its
    stored form, when every field is a number or bits type and their sizes add up to the bits'."""
    kinds = [ft.writeas.cat for _, ft in w.fields]
    size = sum(ft.writeas.nbytes for _, ft in w.fields)
    if same_type and size == len(value.data) and all(k is Cat.PRIM or k is Cat.BITS for k in kinds):
        return value.data
    raise ConversionError(
        f"{value.type} read as {len(value.data)} raw bytes cannot be written as the struct {w.key} "
        f"({len(w.fields)} fields, {size} bytes of numbers)",
        path=path,
    )


def _encode_bits(w: JT, value: Any, path: tuple[PathSegment, ...]) -> bytes:
    if isinstance(value, JuliaBits):
        if len(value.data) != w.nbytes:
            raise ConversionError(f"{w.key} needs {w.nbytes} bytes, found {len(value.data)}", path=path)
        return value.data
    if isinstance(value, (np.generic, np.ndarray)) and np.asarray(value).dtype.itemsize == w.nbytes:
        arr = np.asarray(value)
        if arr.size == 1:
            return arr.reshape(1).view(np.uint8).tobytes()
    raise ConversionError(f"cannot store {type(value).__name__} as {w.key}", path=path)
