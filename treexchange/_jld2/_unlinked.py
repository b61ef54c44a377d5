"""Object headers a JLD2 file holds that no name or reference reaches.

JLD2 writes every object once, front to back, and links it when its session closes; a save that
stopped partway (``@save`` of a whole workspace, whose handler rethrew while writing one
variable) leaves what it wrote of that value in the file, and ``delete!`` unlinks a name
without reclaiming its objects. Those bytes record no value: no re-encoding puts them back, so
``convert --keep-format`` names them when its output differs (:func:`unlinked_headers`).

Found by searching the file for the signature of version-2 object headers (``OHDR``, the only
ones JLD2 writes) and keeping the candidates whose lookup3 checksum holds (bytes inside array
data that happen to spell ``OHDR`` do not) and which reading did not reach: not parsed by the
reader (:meth:`HDF5File.headers_read`), not read as a value by ``read_objects`` (in bulk: no
header parsed), not the target of a link of a group reached from the root (``/_types``
included: a committed type no value uses, and what its parameters refer to) nor of an
object-reference attribute of a header read. Global heaps (``GCOL``) and continuation chunks
(``OCHK``) have other signatures. A header whose checksum holds yet which lies inside the data of
a dataset reading reached (its compact, contiguous or chunk extents) is a copy of a header held
as a value's bytes (a file's bytes saved in an array), not an object: not counted.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .._errors import TreexchangeError
from .._hdf5._cursor import FORMAT_ERRORS
from .._hdf5._lookup3 import lookup3
from .._hdf5._model import H5Class
from .._hdf5._objectheader import first_chunk

if TYPE_CHECKING:  # (annotations only)
    from .._hdf5 import HDF5File
    from .._hdf5._objectheader import ObjectHeader
    from ._reader import Reader

MAX_COUNTED = 1000  # unlinked headers counted (the note says "at least" beyond)
_MAX_CANDIDATES = 20_000  # signatures outside what reading reached whose checksum is computed
_MAX_ATTRIBUTE_REFERENCES = 1 << 12  # references taken from one attribute
_MAX_HEADER_BYTES = 1 << 20  # a longer first chunk is not taken for a header (bounds the hashing)


def unlinked_headers(reader: Reader, reached: Iterable[int] = ()) -> list[int]:
    """The absolute offsets of the version-2 object headers (checksum verified) in the file
    that reading did not reach, in file order, at most :data:`MAX_COUNTED`. Meant for after the
    whole file was read: ``reached`` the datasets ``read_objects`` reached
    (``Objects.reached``; those read in bulk have no header parsed), the headers the reader
    parsed and the targets of every group's links count as reached.

    Example:
        >>> import os, tempfile, numpy as np, treexchange
        >>> from treexchange._reader import File, read_objects
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.frombuffer(b"OHDR" * 8, "<u4"))
        >>> with File(path) as f:
        ...     unlinked_headers(f.reader, read_objects(f).reached)
        []
    """
    h5 = reader.h5
    linked = _linked(reader)
    _resolve_committed_types(reader)
    read = h5.headers_read()
    known = set(read).union(reached, linked, _attribute_references(read.values()))
    found: list[int] = []
    candidates = 0
    data: _DataExtents | None = None  # made when a first header passes: most files have none
    for offset in h5.occurrences(b"OHDR", h5.base):
        if offset - h5.base in known:
            continue
        candidates += 1
        if candidates > _MAX_CANDIDATES or len(found) >= MAX_COUNTED:
            break
        if _is_header(h5, offset):
            if data is None:
                data = _DataExtents(h5, known)
            if not data.covers(offset):
                found.append(offset)
    return found


class _DataExtents:
    """The byte ranges holding the data of the datasets among ``addresses`` (relative): compact
    and contiguous data, and every stored chunk, as absolute ``[start, end)`` ranges."""

    def __init__(self, h5: HDF5File, addresses: Iterable[int]) -> None:
        ranges: list[tuple[int, int]] = []
        for address in addresses:
            try:
                obj = h5.object(address)  # (parsed before, or alike to one parsed: cheap)
                ranges.extend(_data_ranges(h5, obj))
            except (TreexchangeError, *FORMAT_ERRORS):
                continue  # (not a dataset reading could describe: it holds no data we know of)
        ranges.sort()
        self._starts = [start for start, _ in ranges]
        # the furthest end of the ranges up to each one (ranges may nest or overlap)
        self._reach: list[int] = []
        furthest = -1
        for _, end in ranges:
            furthest = max(furthest, end)
            self._reach.append(furthest)

    def covers(self, offset: int) -> bool:
        """Whether ``offset`` (absolute) lies inside one of the ranges."""
        i = bisect.bisect_right(self._starts, offset)
        return i > 0 and self._reach[i - 1] > offset


def _data_ranges(h5: HDF5File, obj: ObjectHeader) -> list[tuple[int, int]]:
    layout = obj.layout
    if layout is None:
        return []  # a group, a committed type
    if layout.kind in ("compact", "contiguous"):
        at = layout.data_offset
        return [] if at is None or layout.data_size <= 0 else [(at, at + layout.data_size)]
    # only chunked datasets need _chunks (and its filters), as HDF5File.raw_data imports it
    from .._hdf5._chunks import iter_chunks

    return [(c.offset, c.offset + c.size) for c in iter_chunks(h5, obj) if c.size > 0]


def _linked(reader: Reader) -> set[int]:
    """The addresses every group reached from the root links to (``/_types`` included)."""
    seen = {reader.root_address}
    groups = [reader.root_address]
    while groups:
        try:
            targets = reader.links(groups.pop()).values()
        except TreexchangeError:
            continue  # (a group reading could not list: its links reached nothing)
        for address in targets:
            if address in seen:
                continue
            seen.add(address)
            try:
                if reader.object_kind(address) == "group":
                    groups.append(address)
            except TreexchangeError:
                continue
    return seen


def _resolve_committed_types(reader: Reader) -> None:
    """Decode every type ``/_types`` holds, so that the datasets their parameters refer to (a
    ``DataType`` value, a number in ``Val{3}``) count as read, whether or not a value used them."""
    try:
        types_at = reader.links(reader.root_address).get("_types")
        addresses = [] if types_at is None else list(reader.links(types_at).values())
    except TreexchangeError:
        return
    for address in addresses:
        try:
            reader.types.committed(address)
        except TreexchangeError:
            continue  # (a type the file cannot describe: what it refers to stays unread)


def _attribute_references(headers: Iterable[ObjectHeader]) -> set[int]:
    """The objects the object-reference attributes of ``headers`` refer to: JLD2 gives an
    array of a custom-serialized type a ``julia_type`` attribute referring to the DataType
    dataset of its type, which reading needs not follow (the committed type tells it)."""
    found: set[int] = set()
    for obj in {id(h): h for h in headers}.values():  # (headers alike share one object)
        try:
            attributes = obj.attributes.values()
        except (TreexchangeError, *FORMAT_ERRORS):
            continue
        for attr in attributes:
            if attr.type.cls == H5Class.REFERENCE and attr.type.size == 8:
                count = min(len(attr.data) // 8, _MAX_ATTRIBUTE_REFERENCES)
                found.update(struct.unpack_from(f"<{count}Q", attr.data))
    return found


def _is_header(h5: HDF5File, offset: int) -> bool:
    """Whether a version-2 object header whose first chunk's checksum holds starts at ``offset``."""
    buf = h5.buffer
    try:
        chunk = first_chunk(buf, offset)
    except (TreexchangeError, *FORMAT_ERRORS):
        return False
    if chunk is None or chunk[2] - offset > _MAX_HEADER_BYTES:
        return False
    end = chunk[2]
    return lookup3(buf[offset:end]) == int.from_bytes(buf[end : end + 4], "little")
