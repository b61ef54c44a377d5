"""Object headers (version 1 and version 2 ``OHDR``), with every continuation chunk followed.

:func:`read_messages` turns the bytes of one object header into its message list; the
:class:`ObjectHeader` built from it decodes the messages a reader cares about on first use.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from .._errors import FormatError, LimitError, TreexchangeError, UnsupportedError
from .._limits import Limits
from . import _messages as m
from ._cursor import LOW_LEVEL_ERRORS, Cursor, as_treexchange_error, format_errors
from ._datatype import parse_datatype
from ._lookup3 import lookup3
from ._model import Attribute, Dataspace, Filter, H5Type, Layout, Message

if TYPE_CHECKING:
    from ._file import HDF5File

Kind = Literal["group", "dataset", "datatype", "other"]
RawMessage = tuple[int, int, int, int]
"""A message as :func:`read_messages` returns it; :class:`Message` names the same fields."""


_V2_HEAD = struct.Struct("<BHB")  # type, body size, flags
_V2_HEAD_ORDER = struct.Struct("<BHB2x")  # ... then creation order (header flag bit 2), skipped
_V1_HEAD = struct.Struct("<HHB3x")  # type, body size, flags, 3 reserved bytes
_V2_PREFIX = struct.Struct("<4sBB")  # "OHDR", version, flags
_V1_PREFIX = struct.Struct("<BxHII")  # version, reserved, messages, reference count, size
_V2_SIZE = tuple(struct.Struct(f"<{c}") for c in "BHIQ")  # chunk 0 size: 1, 2, 4 or 8 bytes


def read_messages(
    c: Cursor,
    offset: int,
    base: int,
    limits: Limits,
    *,
    verify_checksums: bool = False,
    first: tuple[int, int, int] | None = None,
) -> tuple[int, list[RawMessage]]:
    """Decode the object header at absolute ``offset``: ``(version, messages)``, each message
    a plain ``(type, flags, body offset, body size)`` tuple (see :class:`Message`).

    ``c`` supplies the buffer and the field widths. Continuation chunks are followed in the order
    their continuation messages appear (each chunk once: a chunk seen twice is a cycle and raises
    FormatError). NIL messages are dropped. ``first``: what :func:`first_chunk` gives for
    ``offset`` when the caller has it already (None: found here).

    Example:
        >>> import h5py, io
        >>> from treexchange._hdf5 import HDF5File
        >>> bio = io.BytesIO()
        >>> with h5py.File(bio, "w", libver="latest") as f:
        ...     f.attrs["a"] = 1
        >>> h5 = HDF5File(bio.getvalue())
        >>> version, msgs = read_messages(h5._cursor(0), h5.absolute(h5.root_address), h5.base, h5.limits)
        >>> version, [hex(msg[0]) for msg in msgs if msg[0] == 0x0C]
        (2, ['0xc'])
    """
    buf = c.buf
    n = len(buf)
    if offset < 0 or offset + 6 > n:
        raise FormatError(f"truncated: no room for an object header ({n} byte file)", offset=offset)
    messages: list[RawMessage] = []
    widths = (c.offset_size, c.length_size, base, limits.max_header_messages)
    chunk0 = first_chunk(buf, offset) if first is None else first
    if chunk0 is not None:
        flags, start, end = chunk0
        size = end - start
        head = _V2_HEAD_ORDER if flags & 0x04 else _V2_HEAD
        queue = _chunk(buf, start, start + size, head, messages, widths)
        if verify_checksums:
            _check(buf, offset, start + size, "object header")
        if queue:
            seen = {offset}
            while queue:
                addr, length = queue.pop(0)
                _guard_chunk(addr, length, seen, n)
                if length < 8:
                    raise FormatError("continuation chunk too short", offset=addr)
                got = bytes(buf[addr : addr + 4])
                if got != b"OCHK":
                    raise FormatError(
                        f"bad object header continuation signature {got!r} (expected b'OCHK')", offset=addr
                    )
                if verify_checksums:
                    _check(buf, addr, addr + length - 4, "object header continuation")
                # depth first, so messages come out in the order the chunks are chained
                queue[:0] = _chunk(buf, addr + 4, addr + length - 4, head, messages, widths)
        return 2, messages
    if buf[offset] != 1:
        raise FormatError(
            f"no object header here (version byte {buf[offset]}, no OHDR signature)", offset=offset
        )
    if offset + 16 > n:
        raise FormatError(f"truncated: no room for an object header ({n} byte file)", offset=offset)
    _v, _count, _refs, size = _V1_PREFIX.unpack_from(buf, offset)  # the count is not relied upon
    start = offset + 16  # the 12-byte prefix is padded to 16 bytes
    if start + size > n:
        raise FormatError(f"truncated: need {size} byte(s), {n - start} left", offset=start)
    queue = _chunk(buf, start, start + size, _V1_HEAD, messages, widths)
    seen = {offset}
    while queue:
        addr, length = queue.pop(0)
        _guard_chunk(addr, length, seen, n)
        queue[:0] = _chunk(buf, addr, addr + length, _V1_HEAD, messages, widths)
    return 1, messages


def first_chunk(buf: memoryview, offset: int) -> tuple[int, int, int] | None:
    """``(flags, start, end)`` of the first chunk of the version 2 object header at ``offset``
    (its messages are ``buf[start:end]``, the checksum follows), or None for version 1.

    Raises FormatError as :func:`read_messages` does (a truncated or unknown header).
    """
    n = len(buf)
    if offset < 0 or offset + 6 > n:
        raise FormatError(f"truncated: no room for an object header ({n} byte file)", offset=offset)
    sig, v, flags = _V2_PREFIX.unpack_from(buf, offset)
    if sig != b"OHDR":
        return None
    if v != 2:
        raise FormatError(f"unknown OHDR version {v}", offset=offset + 4)
    pos = offset + 6
    if flags & 0x20:
        pos += 16  # access, modification, change, birth times
    if flags & 0x10:
        pos += 4  # attribute phase change values
    size_field = _V2_SIZE[flags & 0x03]
    w = size_field.size
    if pos + w > n:
        raise FormatError(f"truncated: need {w} byte(s), {max(n - pos, 0)} left", offset=pos)
    (size,) = size_field.unpack_from(buf, pos)
    start = pos + w
    if start + size + 4 > n:  # the chunk and its checksum
        raise FormatError(f"truncated: need {size + 4} byte(s), {n - start} left", offset=start)
    return flags, start, start + size


def _guard_chunk(addr: int, length: int, seen: set[int], size: int) -> None:
    if addr in seen:
        raise FormatError("object header continuation cycle", offset=addr)
    seen.add(addr)
    if addr + length > size:
        raise FormatError(f"continuation chunk of {length} bytes runs past the end of the file", offset=addr)


def _check(buf: memoryview, start: int, end: int, what: str) -> None:
    if end + 4 > len(buf):
        raise FormatError(f"{what} checksum runs past the end of the file", offset=end)
    stored = int.from_bytes(buf[end : end + 4], "little")
    if lookup3(buf[start:end]) != stored:
        raise FormatError(f"{what} checksum mismatch", offset=end)


def _chunk(
    buf: memoryview,
    pos: int,
    end: int,
    head: struct.Struct,
    messages: list[RawMessage],
    widths: tuple[int, int, int, int],
) -> list[tuple[int, int]]:
    """Append the messages in ``buf[pos:end]`` to ``messages``; return the continuations found.

    Message headers are unpacked straight from the buffer with one ``struct`` call each, not
    through a Cursor: this loop runs for every message of every object (the hot path of opening
    a file of many arrays). Every body is bounds-checked before it is sliced. ``widths``: size
    of offsets, size of lengths, base address, ``max_header_messages``.
    """
    unpack = head.unpack_from
    hsize = head.size
    cap = widths[3]
    room = cap - len(messages)  # messages this header may still have
    append = messages.append
    pending: list[tuple[int, int]] = []
    while end - pos >= hsize:  # fewer bytes left than a message header: a gap
        mtype, size, mflags = unpack(buf, pos)
        body_at = pos + hsize
        pos = body_at + size
        if pos > end:
            raise FormatError(f"truncated: need {size} byte(s), {end - body_at} left", offset=body_at)
        if mtype == _NIL:
            continue
        if room <= 0:
            raise LimitError(
                f"object header has more than max_header_messages={cap} messages", offset=body_at
            )
        room -= 1
        if mtype == _CONTINUATION:
            bc = Cursor(buf, body_at, pos, offset_size=widths[0], length_size=widths[1])
            pending.append(m.parse_continuation(bc, widths[2]))
        append((mtype, mflags, body_at, size))
    return pending


_NIL = m.NIL  # (module constants: read in the loop above without an attribute lookup)
_CONTINUATION = m.CONTINUATION


# Keys of HDF5File._memo tables: messages whose decoding depends on their body bytes alone (no
# addresses, no file state), so identical bodies -- every Float32 array of a Flux state has the
# same datatype message, most have one of a few dataspaces -- are decoded once per file.
_DATATYPE_MEMO = "datatype"
_DATASPACE_MEMO = "dataspace"
_FILTERS_MEMO = "filters"
_SHARED_MEMO = "shared"  # shared datatype messages: the committed type they refer to
MEMO_TABLES = (_DATATYPE_MEMO, _DATASPACE_MEMO, _FILTERS_MEMO, _SHARED_MEMO)


_UNSET: Any = object()  # a decoded view not computed yet (None is a valid decoded value)
_TYPE_OF = operator.itemgetter(0)  # a raw message's type


class ObjectHeader:
    """A parsed object header. Decoded views (``datatype``, ``layout``, ...) are computed once.

    ``address`` is relative (what links and references hold); ``offset`` is absolute.

    Slots, not an instance ``__dict__``: a file of 20,000 arrays has 30,000 headers alive while
    it is open, and every extra container per header is one more object the cyclic garbage
    collector scans on each full collection. Each decoded view is kept in its own slot
    (``_UNSET`` until first use) behind a property.
    """

    __slots__ = (
        "_attributes",
        "_dataspace",
        "_datatype",
        "_fill_value",
        "_filters",
        "_layout",
        "_raw",
        "_shift",
        "_types",
        "address",
        "file",
        "kind",
        "offset",
        "version",
    )

    def __init__(
        self, file: HDF5File, address: int, offset: int, version: int, messages: Sequence[RawMessage]
    ) -> None:
        self.file = file
        self.address = address
        self.offset = offset
        self.version = version
        # Kept as plain tuples of ints (Message objects are made on request): the garbage
        # collector stops tracking exact tuples of atomic values, and a file of 20,000 arrays
        # has 100,000 messages it would otherwise scan on every full collection.
        raw = self._raw = tuple(messages)
        self._shift = 0  # added to the body offsets in ``_raw`` (see _clone_at)
        # The type of each message, one byte each (types beyond 254 as 255: none that is looked
        # up): ``_types.find(t)`` is the index of the first message of type t. Bytes, not a dict
        # of type -> message, because bytes are never tracked by the cyclic garbage collector.
        try:
            self._types = bytes(map(_TYPE_OF, raw))
        except ValueError:  # a type beyond 255 (version 1 types are 16-bit)
            self._types = bytes([t if t < 255 else 255 for t, _, _, _ in raw])
        self.kind: Kind = _kind_of(self._types)
        self._datatype: H5Type | None = _UNSET
        self._dataspace: Dataspace | None = _UNSET
        self._layout: Layout | None = _UNSET
        self._filters: tuple[Filter, ...] = _UNSET
        self._fill_value: bytes | None = _UNSET
        self._attributes: dict[str, Attribute] = _UNSET

    def _clone_at(self, address: int, offset: int) -> ObjectHeader:
        """A header with the same bytes as this one but for its layout message's body, at
        ``offset`` (see :mod:`._headermemo`): same messages, shifted, and the decoded views
        that depend on those bytes alone (not the layout, not the attributes, which hold
        positions). Built slot by slot: this is the hot path of opening many alike datasets.

        The message list itself is shared, not copied: ``_shift`` says how far this header's
        bodies lie from the offsets in it (no tuple per message per header, objects that each
        garbage collection would scan until it untracks them)."""
        obj = object.__new__(type(self))
        obj.file = self.file
        obj.address = address
        obj.offset = offset
        obj.version = self.version
        obj._raw = self._raw
        obj._shift = self._shift + offset - self.offset
        obj._types = self._types
        obj.kind = self.kind
        obj._datatype = self._datatype
        obj._dataspace = self._dataspace
        obj._filters = self._filters
        obj._fill_value = self._fill_value
        obj._layout = _UNSET
        obj._attributes = _UNSET
        return obj

    def __repr__(self) -> str:
        return f"<ObjectHeader {self.kind} at {self.address} (v{self.version}, {len(self._raw)} msgs)>"

    # --- raw access --------------------------------------------------------------------------
    @property
    def messages(self) -> tuple[Message, ...]:
        """Every message in header order (continuation chunks followed; NIL messages dropped)."""
        shift = self._shift
        return tuple(Message(t, f, at + shift, size) for t, f, at, size in self._raw)

    def find(self, mtype: int) -> Message | None:
        """The first message of type ``mtype``, or None."""
        raw = self._first(mtype)
        return None if raw is None else Message._make(raw)

    def _first(self, mtype: int) -> RawMessage | None:
        i = self._types.find(mtype) if 0 <= mtype < 255 else -1
        if i < 0:
            return None
        raw = self._raw[i]
        shift = self._shift
        if shift:
            t, f, at, size = raw
            return t, f, at + shift, size
        return raw

    def find_all(self, mtype: int) -> list[Message]:
        shift = self._shift
        return [Message(t, f, at + shift, size) for t, f, at, size in self._raw if t == mtype]

    def cursor(self, msg: RawMessage) -> Cursor:
        """A cursor bounded to ``msg``'s body."""
        _, _, offset, size = msg
        return self.file._cursor(offset, offset + size)

    def body(self, msg: RawMessage) -> memoryview:
        """The bytes of ``msg``'s body (a view of the file)."""
        _, _, offset, size = msg
        return self.file.buffer[offset : offset + size]

    # --- decoded views -----------------------------------------------------------------------
    @property
    def datatype(self) -> H5Type | None:
        value = self._datatype
        if value is _UNSET:
            value = self._datatype = self._decode_datatype()
        return value

    def _decode_datatype(self) -> H5Type | None:
        """The datatype message, committed (shared) types resolved, ``committed_at`` set."""
        msg = self._first(m.DATATYPE)
        if msg is None:
            return None
        try:  # (format_errors, without a context manager: every committed type comes here)
            if msg[1] & m.MSG_FLAG_SHARED:
                return self.file._memo(_SHARED_MEMO, msg, self._parse_shared)
            return self.file._memo(_DATATYPE_MEMO, msg, self._parse_datatype)
        except TreexchangeError:
            raise
        except LOW_LEVEL_ERRORS as err:
            raise as_treexchange_error(err, self.offset) from err

    def _parse_shared(self, msg: RawMessage) -> H5Type:
        # A shared message's body is the address of the committed type: the same body, the
        # same (resolved, immutable) type.
        return self.file._committed_type(m.parse_shared_address(self.cursor(msg)))

    def _parse_datatype(self, msg: RawMessage) -> H5Type:
        return parse_datatype(self.cursor(msg), self.file.limits, known=self.file.known_compounds)

    @property
    def dataspace(self) -> Dataspace | None:
        value = self._dataspace
        if value is _UNSET:
            value = self._dataspace = self._decode_dataspace()
        return value

    def _decode_dataspace(self) -> Dataspace | None:
        """The dataspace message (dims in HDF5 order), or None."""
        msg = self._first(m.DATASPACE)
        if msg is None:
            return None
        _, flags, at, _ = msg
        if flags & m.MSG_FLAG_SHARED:
            raise UnsupportedError("shared dataspace messages are not supported", offset=at)
        try:  # (format_errors, without a context manager)
            return self.file._memo(_DATASPACE_MEMO, msg, self._parse_dataspace)
        except TreexchangeError:
            raise
        except LOW_LEVEL_ERRORS as err:
            raise as_treexchange_error(err, self.offset) from err

    def _parse_dataspace(self, msg: RawMessage) -> Dataspace:
        return m.parse_dataspace(self.cursor(msg))

    @property
    def layout(self) -> Layout | None:
        value = self._layout
        if value is _UNSET:
            value = self._layout = self._decode_layout()
        return value

    def peek_layout(self) -> Layout | None:
        """:attr:`layout`, decoded but not kept when it was not decoded yet."""
        value = self._layout
        return self._decode_layout() if value is _UNSET else value

    def _decode_layout(self) -> Layout | None:
        """The data layout message with absolute offsets, or None (not a dataset)."""
        msg = self._first(m.LAYOUT)
        if msg is None:
            return None
        with format_errors(self.offset):
            layout = m.parse_layout(self.cursor(msg), self.file.base)
            if layout.kind == "contiguous" and layout.version < 3:
                # Old layouts do not store the size: it is dataspace x datatype.
                space, dtype = self.dataspace, self.datatype
                n = (space.count if space else 0) * (dtype.size if dtype else 0)
                layout = replace(layout, data_size=n)
            return layout

    @property
    def filters(self) -> tuple[Filter, ...]:
        value = self._filters
        if value is _UNSET:
            value = self._filters = self._decode_filters()
        return value

    def _decode_filters(self) -> tuple[Filter, ...]:
        """The filter pipeline in write order (decoding applies it in reverse); () if none."""
        with format_errors(self.offset):
            msg = self.find(m.FILTER_PIPELINE)
            if msg is None:
                return ()
            return self.file._memo(_FILTERS_MEMO, msg, self._parse_filters)

    def _parse_filters(self, msg: RawMessage) -> tuple[Filter, ...]:
        return m.parse_filters(self.cursor(msg))

    @property
    def fill_value(self) -> bytes | None:
        value = self._fill_value
        if value is _UNSET:
            value = self._fill_value = self._decode_fill_value()
        return value

    def _decode_fill_value(self) -> bytes | None:
        """The dataset's fill value bytes, or None (then unwritten chunks read as zeros)."""
        with format_errors(self.offset):
            msg = self.find(m.FILL_VALUE) or self.find(m.FILL_VALUE_OLD)
            if msg is None or msg.flags & m.MSG_FLAG_SHARED:
                return None
            return m.parse_fill_value(self.cursor(msg), msg.type)

    @property
    def attributes(self) -> dict[str, Attribute]:
        value = self._attributes
        if value is _UNSET:
            value = self._attributes = self._decode_attributes()
        return value

    def _decode_attributes(self) -> dict[str, Attribute]:
        """Attributes in on-disk order (compact messages), then dense storage if any."""
        if m.ATTRIBUTE not in self._types and m.ATTRIBUTE_INFO not in self._types:
            return {}  # most datasets of a JLD2 file have none
        file = self.file
        buf, forms, shift = file.buffer, file.attribute_forms, self._shift
        with format_errors(self.offset):
            out: dict[str, Attribute] = {}
            for mtype, flags, at, size in self._raw:
                if mtype != m.ATTRIBUTE:
                    continue
                at += shift
                if flags & m.MSG_FLAG_SHARED:
                    raise UnsupportedError("shared attribute messages are not supported", offset=at)
                # a form met before: no cursor, nothing decoded but the data's place
                attr = m.attribute_of_form(buf, at, at + size, forms)
                if attr is None:
                    c = file._cursor(at, at + size)
                    attr = m.new_attribute_form(
                        c, file._committed_type, file.limits, forms, file.known_compounds
                    )
                out[attr.name] = attr
            info = self.find(m.ATTRIBUTE_INFO)
            if info is not None:
                out.update(
                    self.file._dense_attributes(m.parse_attribute_info(self.cursor(info), self.file.base))
                )
            return out

    def links(self) -> dict[str, int]:
        """Hard links of a group: name -> relative address, in link order.

        Link order: compact link messages in creation order when every message records one,
        else on-disk order (JLD2's insertion order); dense groups by creation-order index when
        present, else by name; symbol-table groups in B-tree (name) order. Soft and external
        links are left out (JLD2 writes none; see :meth:`HDF5File.link_messages`).

        Example:
            >>> import h5py, io
            >>> from treexchange._hdf5 import HDF5File
            >>> bio = io.BytesIO()
            >>> with h5py.File(bio, "w", track_order=True) as f:
            ...     _ = f.create_group("zeta"), f.create_group("alpha")
            >>> with HDF5File(bio.getvalue()) as h5:
            ...     list(h5.root.links())
            ['zeta', 'alpha']
        """
        return {lk.name: lk.address for lk in self.file.link_messages(self) if lk.address is not None}


def _kind_of(types: bytes) -> Kind:
    """What an object header describes, from the types of its messages."""
    if m.LAYOUT in types:
        return "dataset"
    if m.LINK_INFO in types or m.LINK in types or m.SYMBOL_TABLE in types or m.GROUP_INFO in types:
        return "group"
    if m.DATATYPE in types and m.DATASPACE not in types:
        return "datatype"
    return "other"
