"""A struct's on-disk layout (``JuliaStruct.layout``) as JSON, for the tree skeleton (:mod:`._treejson`).

A Julia struct's declared field types are a property of its type, not of its values: a
``Core.Box`` (a closure's reassigned captured variable) declares ``contents::Any``, and one file
holds Boxes of a ``Float64`` and of an ``Int64``. Read from JLD2, each struct carries the layout its
file committed (:class:`~treexchange._jld2._layout.StructLayout`), and the writer follows it; without
it, the writer can only take the field types from the first value of the type it meets, which
a later value of another type does not fit. So the skeleton keeps each distinct layout once (a
table beside the root node) and a struct node names its entry: JLD2 -> safetensors / orbax ->
JLD2 writes the types ``convert`` writes.

An entry: ``jt`` (the committed ``julia_type``), ``h5`` (the committed HDF5 datatype, as the hex
of its datatype message), ``f`` (per Julia field: ``[name, storage, member name or null, declared
type or null]``), ``wt`` (``written_type`` or null), ``fa`` (which per-field attributes the type
carried). A layout whose datatype does not encode and parse back to itself is left out (the
struct is then written as before, its field types from its values); an entry read back is
checked like a datatype read from a file (:func:`~treexchange._hdf5._datatype.parse_datatype`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._errors import FormatError, TreexchangeError
from .._hdf5._cursor import Cursor
from .._hdf5._datatype import parse_datatype
from .._hdf5._model import H5Type
from .._jld2._encode_hdf5 import encode_datatype
from .._jld2._layout import FieldLayout, StructLayout
from .._juliatype import JuliaType

_STORAGES = ("inline", "reference", "ghost")
_FIELD_ATTRS = ("field_names", "field_datatypes", "none")


def _parse_h5(raw: bytes) -> H5Type:
    c = Cursor(memoryview(raw), 0)
    t = parse_datatype(c)
    if c.pos != len(raw):
        raise FormatError("tree metadata: bytes after a struct layout's datatype")
    return t


def _same_member(f: FieldLayout, back: H5Type) -> bool:
    if f.member is None:
        return True
    found = next((m for m in back.members if m.name == f.member.name), None)
    return (
        found is not None
        and found.offset == f.member.offset
        and encode_datatype(found.type) == encode_datatype(f.member.type)
    )


class LayoutTable:
    """The layouts of one skeleton, each once, in order of first use (``encode`` side)."""

    def __init__(self, encode_type: Callable[[JuliaType], dict[str, Any]]) -> None:
        self.entries: list[dict[str, Any]] = []
        self._index: dict[int, int | None] = {}  # id(layout) -> entry (None: left out)
        self._kept: list[Any] = []  # the layouts indexed, alive while their ids are keys
        self._encode_type = encode_type

    def index(self, layout: Any) -> int | None:
        """The entry of ``layout`` (added on first use); ``None`` when it is left out."""
        if not isinstance(layout, StructLayout):
            return None
        key = id(layout)
        if key in self._index:
            return self._index[key]
        self._kept.append(layout)
        entry = self._entry(layout)
        found = None if entry is None else len(self.entries)
        if entry is not None:
            self.entries.append(entry)
        self._index[key] = found
        return found

    def _entry(self, layout: StructLayout) -> dict[str, Any] | None:
        try:
            raw = encode_datatype(layout.h5type)
            back = _parse_h5(raw)
            # Faithful when what is read back encodes as the layout does (the writer writes the
            # encoding; a raw ``props`` of a type built in Python may differ and does not count).
            if encode_datatype(back) != raw or not all(_same_member(f, back) for f in layout.fields):
                return None
        except TreexchangeError:
            return None  # (a datatype class or version the encoder does not write as read)
        et = self._encode_type
        return {
            "jt": et(layout.julia_type),
            "h5": raw.hex(),
            "f": [
                [
                    f.name,
                    f.storage,
                    None if f.member is None else f.member.name,
                    None if f.field_type is None else et(f.field_type),
                ]
                for f in layout.fields
            ],
            "wt": None if layout.written_type is None else et(layout.written_type),
            "fa": layout.field_attrs,
        }


class LayoutReader:
    """The layouts of one skeleton read back (``decode`` side), each parsed once on first use."""

    def __init__(self, entries: Any, decode_type: Callable[[Any], JuliaType]) -> None:
        if not isinstance(entries, list):
            raise FormatError("tree metadata: the struct layout table is not a list")
        self._entries = entries
        self._parsed: dict[int, StructLayout] = {}
        self._decode_type = decode_type

    def get(self, index: Any) -> StructLayout:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self._entries):
            raise FormatError(f"tree metadata: struct layout {index!r} is not in the table")
        found = self._parsed.get(index)
        if found is None:
            try:
                found = self._parse(self._entries[index])
            except (KeyError, TypeError, ValueError) as err:
                raise FormatError(f"tree metadata: bad struct layout {index} ({err})") from None
            self._parsed[index] = found
        return found

    def _parse(self, entry: dict[str, Any]) -> StructLayout:
        h5type = _parse_h5(bytes.fromhex(entry["h5"]))
        members = {m.name: m for m in h5type.members}
        dt = self._decode_type
        fields = []
        for name, storage, member, field_type in entry["f"]:
            if storage not in _STORAGES or (member is None) != (storage == "ghost"):
                raise FormatError(f"tree metadata: field {name!r} stored as {storage!r}")
            if member is not None and member not in members:
                raise FormatError(f"tree metadata: field {name!r} names no member of its datatype")
            fields.append(
                FieldLayout(
                    str(name),
                    storage,
                    None if member is None else members[member],
                    None if field_type is None else dt(field_type),
                )
            )
        if entry["fa"] not in _FIELD_ATTRS:
            raise FormatError(f"tree metadata: field attributes {entry['fa']!r}")
        written = entry["wt"]
        return StructLayout(
            dt(entry["jt"]),
            h5type,
            tuple(fields),
            None if written is None else dt(written),
            entry["fa"],
        )
