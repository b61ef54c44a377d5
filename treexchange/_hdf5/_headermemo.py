"""Object headers that differ only in where their data lie, parsed once per file.

A model file holds thousands of datasets of a few kinds (every ``Float32`` weight matrix of one
shape, every layer of a Flux state): their object headers are the same bytes except for the
data address in the layout message. :class:`HeaderMemo` keys a parsed header by its bytes with
the layout message's body cut out, so the next header with the same key is rebuilt from the
first one (message positions shifted, decoded datatype and dataspace reused) instead of being
parsed and decoded again.

Why that gives exactly what parsing gives: the messages of a version 2 header (without
continuation chunks) follow from the bytes of its first chunk alone, read in order, each
message header giving the size of its body. The key holds every byte of the prefix and the
chunk except the layout body, together with that body's position and size; a parse never reads
inside a body it skips. So two headers with the same key parse to the same messages at the same
relative positions, and every message other than the layout decodes the same. The layout is
always decoded from the header's own bytes. Headers with checksums to verify are not memoized
(the checksum covers the cut bytes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._errors import TreexchangeError
from . import _messages as m
from ._objectheader import ObjectHeader, first_chunk

if TYPE_CHECKING:
    from ._file import HDF5File

_MAX_HEADER_BYTES = 4096  # larger headers (many attributes) are rare: parse them
_MAX_ENTRIES = 4096  # distinct header forms remembered per file (bounds the memory)
_ALIKE_KINDS = 8  # header forms :meth:`HeaderMemo.alike` looks for among one set of addresses
_ALIKE_ROWS = 8192  # headers compared at once (bounds the rows taken: rows x key bytes)
_FEW = 16  # headers up to which comparing each one's bytes costs less than numpy's passes


class HeaderMemo:
    """Per-file memo of parsed object headers (see the module docstring).

    Example:
        >>> import h5py, io, numpy as np
        >>> from treexchange._hdf5 import HDF5File
        >>> bio = io.BytesIO()
        >>> with h5py.File(bio, "w", libver="latest") as f:
        ...     for i in range(3):
        ...         _ = f.create_dataset(f"x{i}", data=np.full(4, i, "<f4"))
        >>> with HDF5File(bio.getvalue()) as h5:
        ...     objs = [h5.object(a) for a in h5.root.links().values()]
        ...     [float(np.frombuffer(h5.raw_data(o), "<f4")[0]) for o in objs], h5._headers.hits
        ([0.0, 1.0, 2.0], 2)
    """

    def __init__(self) -> None:
        # size of the header up to the end of its first chunk -> where the last header of that
        # size remembered had its layout body (relative offset, size)
        self._cuts: dict[int, tuple[int, int]] = {}
        self._protos: dict[tuple[int, int, bytes], ObjectHeader] = {}
        self.hits = 0

    def _key(self, buf: memoryview, offset: int, end: int, cut: tuple[int, int]) -> tuple[int, int, bytes]:
        rel, size = cut
        return rel, size, bytes(buf[offset : offset + rel]) + bytes(buf[offset + rel + size : end])

    def find(self, file: HDF5File, offset: int) -> tuple[ObjectHeader | None, tuple[int, int, int] | None]:
        """The remembered header with the same key as the header at ``offset``, or None; and
        its first chunk as :func:`first_chunk` gives it (None for a version 1 header)."""
        buf = file.buffer
        chunk0 = first_chunk(buf, offset)
        if chunk0 is None:
            return None, None
        end = chunk0[2]
        cut = self._cuts.get(end - offset)
        if cut is None:
            return None, chunk0
        return self._protos.get(self._key(buf, offset, end, cut)), chunk0

    def rebuild(
        self, file: HDF5File, address: int, offset: int
    ) -> tuple[ObjectHeader | None, tuple[int, int, int] | None]:
        """The header at ``offset`` rebuilt from a remembered one with the same key, or None;
        and its first chunk as :func:`first_chunk` gives it (None for a version 1 header), for
        parsing it (``read_messages(first=...)``) and for :meth:`remember` (its end)."""
        proto, chunk0 = self.find(file, offset)
        if proto is None:
            return None, chunk0
        self.hits += 1
        return proto._clone_at(address, offset), chunk0

    def remember(self, obj: ObjectHeader, end: int) -> None:
        """Remember ``obj`` (just parsed; ``end`` as :meth:`rebuild` gave it) if it qualifies:
        a version 2 header, no continuation chunk, exactly one layout message."""
        types = obj._types
        if (
            obj.version != 2
            or end - obj.offset > _MAX_HEADER_BYTES
            or len(self._protos) >= _MAX_ENTRIES
            or m.CONTINUATION in types
            or types.count(m.LAYOUT) != 1
        ):
            return
        layout = obj._first(m.LAYOUT)
        assert layout is not None
        _, _, at, size = layout
        if not obj.offset < at <= at + size <= end:
            return  # (cannot happen without continuation chunks; keep the cut inside the chunk)
        cut = (at - obj.offset, size)
        self._cuts[end - obj.offset] = cut
        self._protos.setdefault(self._key(obj.file.buffer, obj.offset, end, cut), obj)

    def alike(self, file: HDF5File, offsets: np.ndarray) -> list[tuple[ObjectHeader, np.ndarray]]:
        """Sort object headers at absolute ``offsets`` (int64) into groups, each of headers that
        :meth:`rebuild` would rebuild from one remembered header: ``[(that header, offsets)]``.

        In bulk, with numpy: the first header left is parsed (or rebuilt) the usual way, and
        every other one is compared with it byte by byte over exactly the bytes of the memo's
        key (everything up to the end of the first chunk but the layout body; the checksum
        after it must lie in the file, as :func:`first_chunk` requires). Headers in no group
        (unlike any of the first few forms, or not of a form the memo keeps) are left for the
        usual path; so is everything after a header that fails to parse, which the usual path
        then reports in its context. Nothing is added to the file's object cache.
        """
        buf = file.buffer
        size = len(buf)
        data = np.frombuffer(buf, np.uint8)
        groups: list[tuple[ObjectHeader, np.ndarray]] = []
        rest = offsets[(offsets >= 0) & (offsets + 6 <= size)]
        try:
            for _ in range(_ALIKE_KINDS):
                if not rest.size:
                    break
                first = int(rest[0])
                try:
                    file.first_of_group(first - file.base)
                    chunk0 = first_chunk(buf, first)
                except TreexchangeError:
                    break
                proto = cut = None
                if chunk0 is not None:
                    end = chunk0[2]
                    cut = self._cuts.get(end - first)
                    if cut is not None:
                        proto = self._protos.get(self._key(buf, first, end, cut))
                if proto is None or cut is None:
                    rest = rest[rest != first]
                    continue
                same = _key_matches(buf, data, rest, first, end - first, cut)
                if same is None:  # every one of them (the usual case: one kind of header)
                    groups.append((proto, rest))
                    break
                groups.append((proto, rest[same]))
                rest = rest[~same]
        finally:
            del data  # the map may be closed once no view of it is left
        return groups


def _few_match(
    buf: memoryview, starts: list[int], first: int, length: int, cut: tuple[int, int]
) -> np.ndarray | None:
    """:func:`_key_matches` of a few headers, each compared as bytes (a Dict of a few Dicts:
    ten headers cost numpy a dozen passes of fixed cost each)."""
    rel, body = cut
    size = len(buf)
    head, tail = bytes(buf[first : first + rel]), bytes(buf[first + rel + body : first + length])
    same = [
        0 <= at
        and at + length + 4 <= size
        and buf[at : at + rel] == head
        and buf[at + rel + body : at + length] == tail
        for at in starts
    ]
    return None if all(same) else np.array(same, bool)


def _rows_same(
    windows: np.ndarray, starts: np.ndarray, expected: np.ndarray, mask: np.ndarray
) -> np.ndarray | None:
    """For each start, whether its window row equals ``expected`` on the bytes ``mask`` keeps;
    None when every one does (the usual group: no reduction per row, no mask made)."""
    got = windows[starts].view("<u8")  # (a copy: changed in place below)
    np.bitwise_xor(got, expected, out=got)
    np.bitwise_and(got, mask, out=got)
    if not np.count_nonzero(got):
        return None
    return ~got.any(axis=1)  # type: ignore[no-any-return]


def _same_key(
    buf: memoryview, data: np.ndarray, starts: np.ndarray, first: int, length: int, cut: tuple[int, int]
) -> np.ndarray:
    """:func:`_key_matches`, as a mask in every case."""
    same = _key_matches(buf, data, starts, first, length, cut)
    return np.ones(len(starts), bool) if same is None else same


def _key_matches(
    buf: memoryview, data: np.ndarray, starts: np.ndarray, first: int, length: int, cut: tuple[int, int]
) -> np.ndarray | None:
    """Which of the headers at ``starts`` have the bytes of the header at ``first`` over its
    ``length`` bytes but the layout body ``cut`` (relative offset, size), and fit in the file
    as :func:`first_chunk` requires (4 bytes of checksum after them); None when all of them
    do (the usual case, found with one count of the bytes that differ: no mask made).

    Compared 8 bytes at a time: each header's bytes are one row of a window sliding over the
    file (a strided view of ``data``; taking the rows copies each with one ``memcpy``, where a
    gather by word index costs an index per word and a pass per start modulo 8), read as
    little-endian words, the bytes outside the key masked off; a header too close to the end
    of the file for whole words is compared byte by byte.
    """
    size = len(buf)
    rel, body = cut
    if len(starts) <= _FEW:
        return _few_match(buf, starts.tolist(), first, length, cut)
    width = -(-length // 8) * 8
    if width <= size - first:
        keep = np.zeros(width, np.uint8)
        keep[:length] = 0xFF
        keep[rel : rel + body] = 0
        mask = keep.view("<u8")
        expected = np.frombuffer(bytes(buf[first : first + width]), "<u8") & mask
        windows = np.ndarray((size - width + 1, width), np.uint8, data, strides=(1, 1))  # (read-only)
        if (
            0 < len(starts) <= _ALIKE_ROWS
            and int(starts.min()) >= 0
            and int(starts.max()) + max(width, length + 4) <= size
        ):
            # every header whole in the file, with its checksum (the usual case): one pass,
            # without the bookkeeping of which rows fit (a dozen numpy calls less)
            return _rows_same(windows, starts, expected, mask)
    same = np.zeros(len(starts), bool)
    fits = starts + length + 4 <= size
    whole = fits & (starts + width <= size)
    if width <= size - first:
        rows = np.flatnonzero(whole)
        for lo in range(0, len(rows), _ALIKE_ROWS):
            part = rows[lo : lo + _ALIKE_ROWS]
            found = _rows_same(windows, starts[part], expected, mask)
            same[part] = True if found is None else found
        del windows
    else:
        whole[:] = False
    rest = np.flatnonzero(fits & ~whole)
    if rest.size:
        template_bytes = np.frombuffer(bytes(buf[first : first + length]), np.uint8)
        cols = np.concatenate((np.arange(rel), np.arange(rel + body, length)))
        key = template_bytes[cols]
        for lo in range(0, len(rest), _ALIKE_ROWS):
            part = rest[lo : lo + _ALIKE_ROWS]
            same[part] = (data[starts[part][:, None] + cols] == key).all(axis=1)
    return same
