"""Links added to a group whose header an earlier write session already wrote (JLD2.jl's
``save_group`` for a group ``load_group`` read back): into the free space of its last header
chunk while they fit, the rest into a new continuation chunk at the end of the file. See
:mod:`treexchange._jld2._sessions` for what JLD2 does between sessions.

The chunks are kept as bytes without their checksum until the file closes (a later session may
write into one again); the writer then puts each once, checksummed.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import UnsupportedError
from . import _encode_hdf5 as enc

_MSG_CONTINUATION = 0x10
_LINK_ROOM = 12 + 8 + 4  # a link of an 8-byte name (est_link_name_len), as group_extra_space counts
_ESTIMATED_LINKS = 4  # est_num_entries


@dataclass
class SavedHeader:
    """A group header in the file: its chunks (absolute offset, bytes without the checksum) in
    the order they are chained, and how many of the group's links it holds."""

    chunks: list[tuple[int, bytearray]]
    count: int


def link_room(pending: int) -> int:
    """JLD2's ``group_extra_space``: free space for the links a group is expected to get beyond
    ``pending`` (4 links of 8-byte names in all), at most what one NIL message holds.

    Example:
        >>> link_room(1), link_room(4)
        (72, 0)
    """
    return min(max((_ESTIMATED_LINKS - pending) * _LINK_ROOM, 0), 0xFFFF)


def _messages_start(chunk: bytearray, first: bool) -> int:
    if not first:
        return 4  # "OCHK"
    return 6 + (1 << (chunk[5] & 3))  # "OHDR", version, flags, chunk size (no times: JLD2 sets none)


def free_space(chunk: bytearray, first: bool) -> tuple[int, int]:
    """Where ``load_group`` finds room in a header's last chunk: the offset (in ``chunk``) of a
    NIL message of 13 or more bytes that ends where the continuation placeholder starts (new
    links go there; -1: none), and of the placeholder, the 16-byte NIL message that ends the chunk
    (-1: none).

    Example:
        >>> chunk = bytearray(b"OCHK" + enc.nil_message(20) + enc.CONTINUATION_PLACEHOLDER)
        >>> free_space(chunk, first=False)
        (4, 28)
    """
    end = len(chunk)
    pos = _messages_start(chunk, first)
    next_link = placeholder = -1
    while pos + 4 <= end:
        mtype, size = chunk[pos], int.from_bytes(chunk[pos + 1 : pos + 3], "little")
        after = pos + 4 + size
        if mtype == enc.MSG_NIL:
            if placeholder == -1 and end - pos == enc.CONTINUATION_PLACEHOLDER_SIZE:
                placeholder = pos
            elif after + enc.CONTINUATION_PLACEHOLDER_SIZE == end and size >= 13:
                next_link = pos
        else:
            placeholder = -1
            if mtype == _MSG_CONTINUATION:
                next_link = -1
        pos = after
    return next_link, placeholder


def add_links(
    header: SavedHeader, links: Sequence[tuple[str, int]], end: int, base: int, continuation_room: bool
) -> int:
    """Write ``links`` (name, relative address) into ``header`` as JLD2's ``save_group`` does for
    a loaded group; a continuation chunk, if one is needed, is allocated at ``end`` (absolute).
    Returns the new end of the file. ``continuation_room``: the chunk reserves room for more
    links (JLD2 before v0.4.51).

    Example:
        >>> head = bytearray(enc.object_header_unsummed(enc.nil_message(20) + enc.CONTINUATION_PLACEHOLDER))
        >>> saved = SavedHeader([(600, head)], 0)
        >>> add_links(saved, [("a", 48)], 1000, 512, True)  # fits: no new chunk
        1000
        >>> add_links(saved, [("bb", 48)], 1000, 512, True)  # 7 bytes left: a new chunk
        1118
        >>> [offset for offset, _ in saved.chunks], saved.count
        ([600, 1000], 2)
    """
    pending = list(links)
    header.count += len(pending)
    chunk = header.chunks[-1][1]
    next_link, placeholder = free_space(chunk, first=len(header.chunks) == 1)
    if next_link != -1:
        remaining = placeholder - next_link
        pos = next_link
        while pending:
            name, target = pending[0]
            size = enc.link_message_size(name)
            # No gap smaller than a NIL message's 4-byte header is left behind.
            if not (remaining >= size + 4 or remaining == size):
                break
            chunk[pos : pos + size] = enc.link_message(name, target)
            pos += size
            remaining -= size
            pending.pop(0)
        if remaining:
            chunk[pos : pos + remaining] = enc.nil_message(remaining - 4)
    if not pending:
        return end
    if placeholder == -1:
        raise UnsupportedError("a group header without room for a continuation message cannot grow")
    room = link_room(len(pending)) if continuation_room else 0
    body = b"OCHK" + b"".join(enc.link_message(n, t) for n, t in pending)
    if room:
        body += enc.nil_message(room - 4)
    body += enc.CONTINUATION_PLACEHOLDER
    length = len(body) + 4  # with its checksum
    message = enc.message(_MSG_CONTINUATION, struct.pack("<QQ", end - base, length))
    chunk[placeholder : placeholder + len(message)] = message
    header.chunks.append((end, bytearray(body)))
    return end + length
