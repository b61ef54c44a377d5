"""Object headers (version 1 and version 2 ``OHDR``), with every continuation chunk followed.

:func:`read_messages` turns the bytes of one object header into its message list; the
:class:`ObjectHeader` built from it decodes the messages a reader cares about on first use.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Literal

from .._errors import FormatError, LimitError, UnsupportedError
from .._limits import Limits
from . import _messages as m
from ._cursor import Cursor, format_errors
from ._lookup3 import lookup3
from ._model import Attribute, Dataspace, Filter, H5Type, Layout, Message

if TYPE_CHECKING:
    from ._file import HDF5File

Kind = Literal["group", "dataset", "datatype", "other"]


def read_messages(
    c: Cursor, offset: int, base: int, limits: Limits, *, verify_checksums: bool = False
) -> tuple[int, list[Message]]:
    """Decode the object header at absolute ``offset``: ``(version, messages)``.

    Continuation chunks are followed in the order their continuation messages appear (each chunk
    once: a chunk seen twice is a cycle and raises FormatError). NIL messages are dropped.
    """
    hc = c.at(offset)
    hc.need(4)
    messages: list[Message] = []
    seen: set[int] = {offset}
    if bytes(c.buf[offset : offset + 4]) == b"OHDR":
        hc.skip(4)
        v = hc.u8()
        if v != 2:
            raise FormatError(f"unknown OHDR version {v}", offset=offset + 4)
        flags = hc.u8()
        if flags & 0x20:
            hc.skip(16)  # access, modification, change, birth times
        if flags & 0x10:
            hc.skip(4)  # attribute phase change values
        size = hc.uint(1 << (flags & 0x03))
        start = hc.pos
        hc.need(size + 4)
        queue = _v2_chunk(hc.at(start, start + size), flags, base, limits, messages)
        if verify_checksums:
            _check(c.buf, offset, start + size, "object header")
        while queue:
            addr, length = queue.pop(0)
            _guard_chunk(addr, length, seen, c)
            if length < 8:
                raise FormatError("continuation chunk too short", offset=addr)
            c.at(addr, addr + length).signature(b"OCHK", "object header continuation")
            if verify_checksums:
                _check(c.buf, addr, addr + length - 4, "object header continuation")
            # depth first, so messages come out in the order the chunks are chained
            queue[:0] = _v2_chunk(c.at(addr + 4, addr + length - 4), flags, base, limits, messages)
        return 2, messages
    v = hc.u8()
    if v != 1:
        raise FormatError(f"no object header here (version byte {v}, no OHDR signature)", offset=offset)
    hc.skip(1)
    hc.u16()  # total number of messages (counts all chunks; not relied upon)
    hc.u32()  # reference count
    size = hc.u32()
    hc.skip(4)  # the prefix is padded to 16 bytes
    start = hc.pos
    hc.need(size)
    queue = _v1_chunk(hc.at(start, start + size), base, limits, messages)
    while queue:
        addr, length = queue.pop(0)
        _guard_chunk(addr, length, seen, c)
        queue[:0] = _v1_chunk(c.at(addr, addr + length), base, limits, messages)
    return 1, messages


def _guard_chunk(addr: int, length: int, seen: set[int], c: Cursor) -> None:
    if addr in seen:
        raise FormatError("object header continuation cycle", offset=addr)
    seen.add(addr)
    if addr + length > len(c.buf):
        raise FormatError(f"continuation chunk of {length} bytes runs past the end of the file", offset=addr)


def _check(buf: memoryview, start: int, end: int, what: str) -> None:
    stored = int.from_bytes(buf[end : end + 4], "little")
    if lookup3(buf[start:end]) != stored:
        raise FormatError(f"{what} checksum mismatch", offset=end)


def _add(messages: list[Message], msg: Message, limits: Limits) -> None:
    if len(messages) >= limits.max_header_messages:
        raise LimitError(
            f"object header has more than max_header_messages={limits.max_header_messages} messages",
            offset=msg.offset,
        )
    messages.append(msg)


def _v2_chunk(
    c: Cursor,
    flags: int,
    base: int,
    limits: Limits,
    messages: list[Message],
) -> list[tuple[int, int]]:
    pending: list[tuple[int, int]] = []
    head = 6 if flags & 0x04 else 4
    while c.remaining >= head:  # fewer bytes left than a message header: a gap
        mtype = c.u8()
        size = c.u16()
        mflags = c.u8()
        if flags & 0x04:
            c.u16()  # creation order
        body_at = c.pos
        body = c.bytes(size)
        if mtype == m.NIL:
            continue
        msg = Message(mtype, mflags, body_at, body)
        if mtype == m.CONTINUATION:
            pending.append(m.parse_continuation(_body_cursor(c, msg), base))
        _add(messages, msg, limits)
    return pending


def _v1_chunk(c: Cursor, base: int, limits: Limits, messages: list[Message]) -> list[tuple[int, int]]:
    pending: list[tuple[int, int]] = []
    while c.remaining >= 8:
        mtype = c.u16()
        size = c.u16()
        mflags = c.u8()
        c.skip(3)
        body_at = c.pos
        body = c.bytes(size)
        if mtype == m.NIL:
            continue
        msg = Message(mtype, mflags, body_at, body)
        if mtype == m.CONTINUATION:
            pending.append(m.parse_continuation(_body_cursor(c, msg), base))
        _add(messages, msg, limits)
    return pending


def _body_cursor(c: Cursor, msg: Message) -> Cursor:
    return c.at(msg.offset, msg.offset + len(msg.body))


class ObjectHeader:
    """A parsed object header. Decoded views (``datatype``, ``layout``, ...) are computed once.

    ``address`` is relative (what links and references hold); ``offset`` is absolute.
    """

    def __init__(
        self, file: HDF5File, address: int, offset: int, version: int, messages: list[Message]
    ) -> None:
        self.file = file
        self.address = address
        self.offset = offset
        self.version = version
        self.messages = messages

    def __repr__(self) -> str:
        return f"<ObjectHeader {self.kind} at {self.address} (v{self.version}, {len(self.messages)} msgs)>"

    # --- raw access --------------------------------------------------------------------------
    def find(self, mtype: int) -> Message | None:
        """The first message of type ``mtype``, or None."""
        for msg in self.messages:
            if msg.type == mtype:
                return msg
        return None

    def find_all(self, mtype: int) -> list[Message]:
        return [msg for msg in self.messages if msg.type == mtype]

    def cursor(self, msg: Message) -> Cursor:
        """A cursor bounded to ``msg``'s body."""
        return self.file._cursor(msg.offset, msg.offset + len(msg.body))

    # --- decoded views -----------------------------------------------------------------------
    @cached_property
    def datatype(self) -> H5Type | None:
        """The datatype message, committed (shared) types resolved, ``committed_at`` set."""
        with format_errors(self.offset):
            msg = self.find(m.DATATYPE)
            if msg is None:
                return None
            c = self.cursor(msg)
            if msg.flags & m.MSG_FLAG_SHARED:
                return self.file._committed_type(m.parse_shared_address(c))
            return self.file._parse_type(c)

    @cached_property
    def dataspace(self) -> Dataspace | None:
        """The dataspace message (dims in HDF5 order), or None."""
        with format_errors(self.offset):
            msg = self.find(m.DATASPACE)
            if msg is None:
                return None
            if msg.flags & m.MSG_FLAG_SHARED:
                raise UnsupportedError("shared dataspace messages are not supported", offset=msg.offset)
            return m.parse_dataspace(self.cursor(msg))

    @cached_property
    def layout(self) -> Layout | None:
        """The data layout message with absolute offsets, or None (not a dataset)."""
        with format_errors(self.offset):
            msg = self.find(m.LAYOUT)
            if msg is None:
                return None
            layout = m.parse_layout(self.cursor(msg), self.file.base)
            if layout.kind == "contiguous" and layout.version < 3:
                # Old layouts do not store the size: it is dataspace x datatype.
                space, dtype = self.dataspace, self.datatype
                n = (space.count if space else 0) * (dtype.size if dtype else 0)
                layout = replace(layout, data_size=n)
            return layout

    @cached_property
    def filters(self) -> tuple[Filter, ...]:
        """The filter pipeline in write order (decoding applies it in reverse); () if none."""
        with format_errors(self.offset):
            msg = self.find(m.FILTER_PIPELINE)
            if msg is None:
                return ()
            return m.parse_filters(self.cursor(msg))

    @cached_property
    def fill_value(self) -> bytes | None:
        """The dataset's fill value bytes, or None (then unwritten chunks read as zeros)."""
        with format_errors(self.offset):
            msg = self.find(m.FILL_VALUE) or self.find(m.FILL_VALUE_OLD)
            if msg is None or msg.flags & m.MSG_FLAG_SHARED:
                return None
            return m.parse_fill_value(self.cursor(msg), msg.type)

    @cached_property
    def attributes(self) -> dict[str, Attribute]:
        """Attributes in on-disk order (compact messages), then dense storage if any."""
        with format_errors(self.offset):
            out: dict[str, Attribute] = {}
            for msg in self.find_all(m.ATTRIBUTE):
                if msg.flags & m.MSG_FLAG_SHARED:
                    raise UnsupportedError("shared attribute messages are not supported", offset=msg.offset)
                attr = m.parse_attribute(self.cursor(msg), self.file._committed_type, self.file.limits)
                out[attr.name] = attr
            info = self.find(m.ATTRIBUTE_INFO)
            if info is not None:
                out.update(
                    self.file._dense_attributes(m.parse_attribute_info(self.cursor(info), self.file.base))
                )
            return out

    @cached_property
    def kind(self) -> Kind:
        types = {msg.type for msg in self.messages}
        if m.LAYOUT in types:
            return "dataset"
        if types & {m.LINK_INFO, m.LINK, m.SYMBOL_TABLE, m.GROUP_INFO}:
            return "group"
        if m.DATATYPE in types and m.DATASPACE not in types:
            return "datatype"
        return "other"

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
