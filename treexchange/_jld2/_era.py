"""Which JLD2.jl release wrote a file, as far as its types tell, and the older rules it followed.

The file header says only the format version (``0.1.1`` for JLD2 0.3 - 0.4.x), yet rules inside
that format changed between releases, and a file that follows an older one cannot be reproduced
byte for byte with the newer one. The reader notes what each type it decodes shows
(``TypeResolver.writer_traits``); this module turns those tell-tales into the older rules the
writer then follows (``JLD2Writer(era_rules=...)``), for ``convert --keep-format``:

* ``tuple:Core.Tuple`` -- a homogeneous tuple type of a concrete element is named
  ``Core.Tuple{T,T,...}``: JLD2 before v0.4.19, which had no ``NTuple`` naming at all (later
  releases show ``NTuple{N,T}``, trait ``tuple:NTuple``).
* ``tuple1:NTuple`` -- a one-element tuple type is named ``NTuple{1,T}`` in a DataType: JLD2
  before v0.4.41 (commit 3933b32, "fix vararg tuples"), whose ``h5convert!`` for
  ``Type{NTuple{N,ET}}`` took every non-empty homogeneous tuple; later releases write ``Tuple{T}``
  (trait ``tuple1:Tuple``).
* ``dict:Vector`` -- a ``Dict``/``IdDict``/``ImmutableDict`` is custom-serialized as its
  ``Vector{Pair{K,V}}`` (``written_type`` ``Core.Array``): JLD2 before v0.4.42 (commit ad988ca),
  whose committed Dict type is a reference type and whose Dict fields refer to the vector
  directly; later releases write a ``JLD2.SerializedDict`` (trait ``dict:SerializedDict``).

* ``layout:0.4.51`` / ``layout:0.4.52`` -- datasets end with a reserved 16-byte NIL message
  (room for a continuation, :func:`header_traits`): JLD2 0.4.51 - 0.4.55, still format 0.1.1.
  v0.4.51 (commit d57995a) kept 0.4's layout choice (arrays under 8192 bytes compact, contiguous
  data right after its header) and wrote a committed type's attributes in the datatype session;
  v0.4.52 chose 0.5's (only empty arrays compact, contiguous data 8-byte aligned; a fresh session
  per attribute). Both name only ``NTuple{2,T}`` (the ``reduce(==, ...)`` test). A non-empty
  array stored compact, or contiguous data not 8-byte aligned, tells 0.4.51; otherwise 0.4.52.

* ``bool:opaque`` -- ``Bool`` is a committed 1-byte opaque type whose ``julia_type`` is
  ``Core.Bool``: JLD2 before v0.3.3 (commit a4deccc, "use standard h5 type for bools"), which
  had no HDF5 type for Bool and committed it as any primitive bits type; later releases store
  a 1-byte bitfield, never committed (trait ``bool:bitfield``).

* ``group:no-link-room`` -- a group header holds its links and the 16 bytes reserved for a
  continuation, no room for more links: JLD2 before v0.4.4 (later ones leave room for 4 links
  of 8-byte names, ``group_extra_space``).
* ``name:Base.Pair`` -- ``Pair`` is named ``Base.Pair``: Julia before 1.7 defined it in Base
  (JLD2 writes a type's module as the running Julia reports it); later ones ``Core.Pair``.
* ``strings:rewritten`` -- the same text in two String datasets: JLD2 tracks a String by its
  text within one write session, so the file was written with a session per top-level name
  (``f[name] = value``, ``write(f, name, value)`` without a session); a dataset reached from
  two names (``strings:shared``) shows one session (``jldsave``).
* ``datatype:v0`` -- datatype messages say version 0 (a class byte without the version bits;
  fixed-point numbers excepted): JLD2 0.4.51 and 0.4.52, fixed in v0.4.53.

A rule is followed only when the file shows it and nothing in the file contradicts it (a file
appended to by two JLD2 releases shows both forms: no one rule set reproduces it).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._errors import TreexchangeError
from .._juliatype import JuliaType, shared_renderings
from ._layout import StructLayout
from ._plans import GhostPlan
from ._unlinked import MAX_COUNTED
from ._writer_types import TypeFactory

if TYPE_CHECKING:  # (annotations only: the reader imports nothing from here)
    from ._reader import Reader

NTUPLE_ONE = "tuple1:NTuple"
NO_NTUPLE = "tuple:Core.Tuple"
DICT_AS_VECTOR = "dict:Vector"
BASE_PAIR = "name:Base.Pair"
SESSION_PER_NAME = "strings:rewritten"
LAYOUT_0_4_51 = "layout:0.4.51"
LAYOUT_0_4_52 = "layout:0.4.52"
DATATYPE_V0 = "datatype:v0"
GROUPS_WITHOUT_ROOM = "group:no-link-room"
BOOL_OPAQUE = "bool:opaque"

# header traits (header_traits): what dataset object headers show
_NIL_TAIL = "header:nil-tail"  # a reserved 16-byte NIL message ends a dataset header
_SMALL_COMPACT = "array:small-compact"  # a non-empty array under 8192 bytes stored compact
_UNALIGNED = "contiguous:unaligned"  # contiguous data not 8-byte aligned
_VERSIONED = "datatype:versioned"  # a datatype message (not fixed-point) of version >= 1
_GROUP_ROOM = "group:link-room"  # a group of < 4 links with room for more in its header
_GROUP_NO_ROOM = "group:no-link-room"  # one without
_COMPRESSED = "dataset:compressed"  # a dataset with a filter pipeline
_CONTINUED = "header:continued"  # an object header continued in a later block (links added)
_ZERO_TAIL = "file:zero-tail"  # zero bytes past the superblock's end-of-file address

_HEADERS_SCANNED = 256  # dataset headers looked at (the first ones by link order)
_MSG_DATASPACE, _MSG_DATATYPE, _MSG_LINK, _MSG_LAYOUT, _MSG_FILTERS = 0x01, 0x03, 0x06, 0x08, 0x0B
_MSG_CONTINUATION = 0x10

# older rule -> (the trait that contradicts it, what it is, the release that changed it)
OLDER_RULES: dict[str, tuple[str, str]] = {
    NO_NTUPLE: (
        "tuple:NTuple",
        "homogeneous tuple types named Core.Tuple{T,T,...}, never NTuple (JLD2 < v0.4.19)",
    ),
    NTUPLE_ONE: (
        "tuple1:Tuple",
        "one-element tuple types named NTuple{1,T} (JLD2 < v0.4.41)",
    ),
    DICT_AS_VECTOR: (
        "dict:SerializedDict",
        "Dicts written as their Vector{Pair} (JLD2 < v0.4.42)",
    ),
    BOOL_OPAQUE: ("bool:bitfield", "Bool a committed 1-byte opaque type (JLD2 < v0.3.3)"),
    BASE_PAIR: ("name:Core.Pair", "Pair named Base.Pair (Julia < 1.7)"),
    SESSION_PER_NAME: ("strings:shared", "a write session per top-level name (f[name] = value)"),
}
ANY_FORMAT_RULES = frozenset({BASE_PAIR, SESSION_PER_NAME})
"""Rules of the Julia version rather than of a JLD2 release: followed in format 0.2.0 too."""


@dataclass(frozen=True)
class Source:
    """What the writer keeps of a file it re-encodes (``convert``), beyond its values: the
    release rules it follows (:func:`era_rules`), the types it wrote by name, and the ``Union``
    descriptions Julia printed
    (``string(U)`` in a ``Core.Union`` dataset depends on what the writing session had imported:
    ``Union{Type{Circle2D}, ...}`` or ``Union{Type{ExtendableGrids.Circle2D}, ...}``), by the
    union type's qualified text."""

    rules: frozenset[str] = frozenset()
    union_descriptions: Mapping[str, str] = field(default_factory=dict)
    by_name: frozenset[str] = frozenset()
    """Struct and tuple types the file wrote as type parameters by name (a DataType dataset)
    where a stored type is committed: they hold no data, or are mutable or large; a type known
    to the writer by name only (a ghost ``Axis{...}`` inside ``Tuple{Axis{...}}``) follows."""
    layouts: Mapping[str, StructLayout] = field(default_factory=dict)
    """The struct types the file committed, by qualified name (:func:`committed_layouts`): the
    writer builds a struct type no value shows (an empty Dict's element type) from its layout,
    and commits it as JLD2 did. Kept only when the output has the input's format (a format-0.1.1
    layout leaves ghost fields out)."""
    mutable: frozenset[str] = frozenset()
    """Zero-size struct types the file shows are mutable (``Objects.mutable_ghosts``): a value
    of one carries no field to say so, yet JLD2 stores it by reference, one dataset per object."""
    recommitted: frozenset[str] = frozenset()
    """Types the file committed more than once (writer keys): a later write session did not
    reuse the committed type an earlier one wrote (JLD2 reads back some as not canonical: a
    struct with a Dict field before v0.4.42), so the writer forgets them when a session closes."""


def committed_layouts(reader: Reader) -> dict[str, StructLayout]:
    """The layout of every plain struct type committed in the file's ``/_types`` group, by the
    qualified text of its ``julia_type``; an empty committed type (a singleton) has no fields.
    Custom-serialized types, JLD2's own (``InlineUnionEl``: the writer lays those out by its
    rules) and types that do not decode are left out: the writer knows them by name only."""
    types_at = reader.links(reader.root_address).get("_types")
    if types_at is None or reader.object_kind(types_at) != "group":
        return {}
    layouts: dict[str, StructLayout] = {}
    with shared_renderings():  # (a nested struct's inner types are printed once, not per level)
        _add_layouts(reader, types_at, layouts)
    return layouts


def _add_layouts(reader: Reader, types_at: int, layouts: dict[str, StructLayout]) -> None:
    for address in reader.links(types_at).values():
        try:
            plan = reader.types.committed(address)
            layout = getattr(plan, "layout", None)
            ghost = isinstance(plan, GhostPlan) and plan.julia_type.name != "Core.Type"
            if ghost and plan.h5type is not None:
                # an empty committed type (a singleton struct): a layout without fields
                layout = StructLayout(plan.julia_type, plan.h5type, ())
            if (
                isinstance(layout, StructLayout)
                and layout.written_type is None
                and not layout.julia_type.name.startswith("JLD2.")  # (its own types: the writer's rules)
            ):
                layouts.setdefault(layout.julia_type.qualified(), layout)
        except TreexchangeError:
            continue  # (a type the file cannot describe within the limits: known by name only)


def type_keys(types: Iterable[JuliaType]) -> frozenset[str]:
    """The writer's keys of ``types`` (``JT.key``: ``Tuple{A}`` and ``NTuple{1,A}`` alike are
    ``Core.Tuple{A}``), for :attr:`Source.by_name`; types the writer cannot build are left out.

    Example:
        >>> sorted(type_keys([JuliaType("Tuple", (JuliaType("Main.Axis"),))]))
        ['Core.Tuple{Main.Axis}']
    """
    factory = TypeFactory()
    keys = set()
    for t in types:
        try:
            keys.add(factory.of_type(t).key)
        except TreexchangeError:
            continue
    return frozenset(keys)


def recommitted_keys(types: Iterable[JuliaType]) -> frozenset[str]:
    """The writer keys (:func:`type_keys`) that more than one of ``types`` has.

    Example:
        >>> a, b = JuliaType("Main.A"), JuliaType("Main.B")
        >>> sorted(recommitted_keys([a, b, JuliaType("Main.A")]))
        ['Main.A']
    """
    seen: set[str] = set()
    twice: set[str] = set()
    for t in types:
        for key in type_keys([t]):
            (twice if key in seen else seen).add(key)
    return frozenset(twice)


def era_rules(traits: Iterable[str]) -> frozenset[str]:
    """The JLD2 release rules a format-0.1.1 file follows, from the tell-tales its types and
    headers show (``TypeResolver.writer_traits``, :func:`header_traits`).

    Example:
        >>> sorted(era_rules({"dict:Vector", "tuple1:Tuple"}))
        ['dict:Vector']
        >>> era_rules({"dict:Vector", "dict:SerializedDict"})
        frozenset()
    """
    seen = set(traits)
    rules = {rule for rule, (newer, _) in OLDER_RULES.items() if rule in seen and newer not in seen}
    if _NIL_TAIL in seen:
        rules.add(LAYOUT_0_4_51 if seen & {_SMALL_COMPACT, _UNALIGNED} else LAYOUT_0_4_52)
        if DATATYPE_V0 in seen and _VERSIONED not in seen:
            rules.add(DATATYPE_V0)
    if _GROUP_NO_ROOM in seen and _GROUP_ROOM not in seen:
        rules.add(GROUPS_WITHOUT_ROOM)
    return frozenset(rules)


def mixed_rules(traits: Iterable[str]) -> list[str]:
    """The rules a file shows in both their older and newer form (written by two releases).

    Example:
        >>> mixed_rules({"dict:Vector", "dict:SerializedDict"})
        ['Dicts written as their Vector{Pair} (JLD2 < v0.4.42)']
    """
    seen = set(traits)
    return [what for rule, (newer, what) in OLDER_RULES.items() if rule in seen and newer in seen]


_RULE_TEXT = {
    **{rule: what for rule, (_, what) in OLDER_RULES.items()},
    LAYOUT_0_4_51: "JLD2 0.4.51's dataset headers (a reserved NIL message, 0.4's layout choice)",
    LAYOUT_0_4_52: "JLD2 0.4.52-0.4.55's dataset headers (a reserved NIL message, 0.5's layout choice)",
    DATATYPE_V0: "datatype messages of version 0 (JLD2 0.4.51-0.4.52)",
    GROUPS_WITHOUT_ROOM: "group headers without room for more links (JLD2 < v0.4.4)",
}


def describe(rules: Iterable[str]) -> list[str]:
    """Each release rule in words.

    Example:
        >>> describe({"tuple1:NTuple"})
        ['one-element tuple types named NTuple{1,T} (JLD2 < v0.4.41)']
    """
    return [_RULE_TEXT[r] for r in sorted(rules) if r in _RULE_TEXT]


def header_traits(reader: Reader) -> set[str]:
    """What the object headers of a file show of the JLD2 release that wrote them (the root
    group, then the first :data:`_HEADERS_SCANNED` groups, datasets and committed datatypes
    reached from it, by link order): a NIL message reserved at the end of datasets, small arrays
    stored compact, unaligned contiguous data, the version of datatype messages, free link space
    in groups; and of how the file was written: headers continued in a later block (links added
    in a later session), zeros past the end-of-file address."""
    traits: set[str] = set()
    if reader.h5.filters_seen:  # (datasets read through references are not scanned below)
        traits.add(_COMPRESSED)
    if _zero_tail(reader):
        traits.add(_ZERO_TAIL)
    for address, kind in _object_addresses(reader):
        messages = _header_messages(reader, address)
        if any(mtype == _MSG_CONTINUATION for mtype, _, _ in messages):
            # JLD2 writes a header whole; it continues one only to add links to a group an
            # earlier session wrote (jldopen(path, "a+"): a subgroup, /_types, the root group).
            traits.add(_CONTINUED)
        if kind == "group":
            count = sum(1 for mtype, _, _ in messages if mtype == _MSG_LINK)
            nils = [len(data) for mtype, _, data in messages if mtype == 0]
            if count < 4:
                # JLD2 >= v0.4.4 leaves room for 4 links of 8-byte names (a NIL message) before
                # the 16 bytes reserved for a continuation; earlier releases only the latter.
                traits.add(_GROUP_NO_ROOM if nils == [16] else _GROUP_ROOM)
            continue
        if messages and messages[-1][0] == 0 and len(messages[-1][2]) == 16:
            traits.add(_NIL_TAIL)
        array = False
        for mtype, flags, data in messages:
            if mtype == _MSG_DATATYPE and data and not flags & 0x02 and data[0] & 0x0F:
                # (not a shared message; fixed-point types had their version in every release)
                traits.add(_VERSIONED if data[0] >> 4 else DATATYPE_V0)
            elif mtype == _MSG_FILTERS:
                traits.add(_COMPRESSED)
            elif mtype == _MSG_DATASPACE and len(data) >= 4:
                array = data[3] == 1 and data[1] > 0  # version 2: rank, flags, type (1: simple)
            elif mtype == _MSG_LAYOUT and array and len(data) >= 4 and data[0] in (3, 4):
                size = int.from_bytes(data[2:4], "little")
                if data[1] == 0 and 0 < size < 8192:
                    traits.add(_SMALL_COMPACT)
                elif data[1] == 1 and len(data) >= 18:
                    at, size = struct.unpack_from("<QQ", data, 2)
                    if size > 0 and reader.h5.absolute(at) % 8:
                        traits.add(_UNALIGNED)
    return traits


def _object_addresses(reader: Reader) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = [(reader.root_address, "group")]
    groups = [reader.root_address]
    seen = set(groups)
    while groups and len(found) < _HEADERS_SCANNED:
        for address in reader.links(groups.pop()).values():
            if address in seen:
                continue
            seen.add(address)
            kind = reader.object_kind(address)
            if kind == "group":
                groups.append(address)
            if kind in ("group", "dataset", "datatype"):
                found.append((address, kind))
    return found[:_HEADERS_SCANNED]


def _header_messages(reader: Reader, address: int) -> list[tuple[int, int, bytes]]:
    """The messages of a version-2 object header's first chunk, NIL ones included (the HDF5
    layer drops those): (type, flags, body) in order; none for anything else."""
    h5 = reader.h5
    start = h5.absolute(address)
    head = bytearray(max(0, min(24, h5.size - start)))
    h5.read_into(start, memoryview(head))
    if len(head) < 7 or head[:4] != b"OHDR" or head[4] != 2:
        return []  # (JLD2 writes version-2 headers only)
    flags = head[5]
    pos = 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
    width = 1 << (flags & 3)
    if pos + width > len(head):
        return []
    chunk = int.from_bytes(head[pos : pos + width], "little")
    pos += width
    body = bytearray(max(0, min(chunk, h5.size - start - pos)))
    h5.read_into(start + pos, memoryview(body))
    messages = []
    at, step = 0, 6 if flags & 0x04 else 4
    while at + step <= len(body):
        mtype, size, mflags = body[at], int.from_bytes(body[at + 1 : at + 3], "little"), body[at + 3]
        messages.append((mtype, mflags, bytes(body[at + step : at + step + size])))
        at += step + size
    return messages


def _zero_tail(reader: Reader) -> bool:
    """Whether the file goes on past its end-of-file address (the superblock's) with zeros only."""
    h5 = reader.h5
    end = h5.superblock.eof_address
    if end is None or end >= h5.size:
        return False
    piece = bytearray(_COMPARED)
    for start in range(end, h5.size, _COMPARED):
        view = memoryview(piece)[: min(_COMPARED, h5.size - start)]
        h5.read_into(start, view)
        if any(view):
            return False
    return True


_KNOWN_CAUSES = {
    _CONTINUED: 'links were added to a group an earlier JLD2 session wrote (jldopen(path, "a+"): its '
    "object header continues in a later block): treexchange replays the write sessions the file shows, "
    "but not links JLD2 fitted into a header's free space",
    _ZERO_TAIL: "the file goes on with zeros past its end-of-file address (JLD2 on Windows maps a file "
    "opened for writing 512 KiB larger and, when nothing was written, closes it without truncating): "
    "treexchange ends the file at that address",
    _COMPRESSED: "it has compressed datasets: treexchange compresses what it converts again only "
    "in JLD2's own form of compress=true (format 0.2.0, with --keep-producer), else as --compress "
    "chooses, in chunk indexes libhdf5 2 reads where JLD2's single-chunk index has 8-byte "
    "dimension sizes it rejects",
}

UNLINKED_OBJECTS = "objects:unlinked"  # object headers nothing links (_unlinked.unlinked_headers)

REPORTED_TRAITS = frozenset({*_KNOWN_CAUSES, UNLINKED_OBJECTS})
"""Traits that explain a difference in any format (the others are format 0.1.1's releases)."""

_COMPARED = 1 << 20  # bytes compared at a time


def _unlinked_cause(unlinked: Sequence[int]) -> str:
    count = f"at least {len(unlinked)}" if len(unlinked) >= MAX_COUNTED else str(len(unlinked))
    return (
        f"{count} object header{'s' if len(unlinked) > 1 else ''} nothing links (the first at byte "
        f"{unlinked[0]}): a save that stopped partway or a delete! leaves them; no re-encoding of the "
        "values puts them back"
    )


def first_difference(original: str, written: str, start: int = 0) -> int | None:
    """The first byte offset (from ``start``) where two files differ, ``None`` if they are the
    same; compared 1 MiB at a time."""
    with open(original, "rb") as a, open(written, "rb") as b:
        a.seek(start)
        b.seek(start)
        offset = start
        while True:
            x, y = a.read(_COMPARED), b.read(_COMPARED)
            if x != y:
                return offset + next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            if not x:
                return None
            offset += len(x)


def difference_note(
    offset: int, traits: Iterable[str], rules: Iterable[str], unlinked: Sequence[int] = ()
) -> str:
    """Why a re-encoded file differs from its input from byte ``offset`` on: the causes its
    traits show, the object headers nothing links (``unlinked``, their file offsets:
    :func:`~treexchange._jld2._unlinked.unlinked_headers`), the rules that were followed.

    Example:
        >>> note = difference_note(540, {"dict:Vector", "dict:SerializedDict"}, ())
        >>> note.startswith("not byte-identical from byte 540 on: it shows both forms of Dicts")
        True
        >>> difference_note(900, (), (), [1200, 1400])  # doctest: +ELLIPSIS
        'not byte-identical from byte 900 on: 2 object headers nothing links (the first at byte 1200)...'
    """
    seen = set(traits)
    causes = [_unlinked_cause(unlinked)] if unlinked else []
    causes += [text for trait, text in _KNOWN_CAUSES.items() if trait in seen]
    causes += [f"it shows both forms of {what}: two JLD2 releases wrote it" for what in mixed_rules(seen)]
    if not causes:
        causes = ["no known cause (a JLD2 rule treexchange does not follow yet: please report the file)"]
    note = f"not byte-identical from byte {offset} on: " + "; ".join(causes)
    followed = describe(rules)
    if followed:
        note += " (followed: " + "; ".join(followed) + ")"
    return note
