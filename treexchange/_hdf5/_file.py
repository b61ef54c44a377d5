"""The read-only HDF5 file: memory map, superblock, object cache, raw data access."""

from __future__ import annotations

import mmap
import os
import struct
import threading
import weakref
from collections.abc import Callable, Iterator
from itertools import repeat
from typing import Any, TypeVar

import numpy as np

from .._errors import FormatError, LimitError, TreexchangeError, UnsupportedError, WrongFormatError, in_file
from .._limits import DEFAULT_LIMITS, Limits
from .._nodeproto import ClosingFile
from . import _messages as m
from ._cursor import FORMAT_ERRORS, Cursor, format_errors, malformed
from ._datatype import KnownCompounds
from ._globalheap import OFFSET_MASK, SIZE_SHIFT, GlobalHeapCollection
from ._groups import dense_attributes, group_links
from ._headermemo import HeaderMemo
from ._model import Attribute, H5Type
from ._objectheader import _UNSET, MEMO_TABLES, ObjectHeader, RawMessage, read_messages
from ._superblock import read_superblock

T = TypeVar("T")

_ADDR_LEN = struct.Struct("<QQ")
_U16 = struct.Struct("<H")
_VLEN = struct.Struct("<IQI")  # a vlen element: count, heap collection address, object index
_UNDEFINED_ADDR = (1 << 64) - 1
_MEMO_BODY_BYTES = 256
_MEMO_ENTRIES = 1 << 14
# Tables whose values depend on the message body and the limits alone (no file state: a datatype
# message holds its whole type, a compound's members included; a dataspace its dims), shared by
# every file opened with the same limits. Bounded: at most _SHARED_ENTRIES per table (emptied
# when full), for at most _SHARED_LIMITS distinct Limits (others get per-file tables).
_SHARED_TABLES = (MEMO_TABLES[0], MEMO_TABLES[1])  # datatype, dataspace
_SHARED_ENTRIES = 1 << 12
_SHARED_LIMITS = 4
_PROCESS_MEMOS: dict[Limits, dict[str, dict[bytes, Any]]] = {}
_PREFETCH_MIN = 1 << 16  # below this, the faults themselves cost less than the system call
_VOUCH_LATER = 256  # groups of headers vouched for at least this large are entered when needed
_RANDOM_ABOVE = 1 << 26  # files up to 64 MiB are read whole by a few read-arounds: keep them
_DENSE_METADATA = 1 << 18  # more than one object header per 256 KiB of file: dense metadata


def _file_memos(limits: Limits) -> dict[str, dict[bytes, Any]]:
    """The :meth:`HDF5File._memo` tables of a file opened with ``limits``: its own for the
    messages whose meaning depends on the file (committed types, filters), the process's for
    datatypes and dataspaces -- the same bytes decode to the same immutable value in every file
    (a checkpoint's Float32 and reference types, its few shapes), so a second file opens without
    decoding them again. Decoding failures are never remembered, so errors are unchanged."""
    shared = _PROCESS_MEMOS.get(limits)
    if shared is None and len(_PROCESS_MEMOS) < _SHARED_LIMITS:
        shared = _PROCESS_MEMOS.setdefault(limits, {table: {} for table in _SHARED_TABLES})
    memos: dict[str, dict[bytes, Any]] = {table: {} for table in MEMO_TABLES}
    if shared is not None:
        memos.update(shared)
    return memos


def _shared_table(limits: Limits, table: str) -> dict[bytes, Any] | None:
    shared = _PROCESS_MEMOS.get(limits)
    return None if shared is None else shared.get(table)


_FEW_RANGES = 16  # headers up to which stored_ranges reads each one's layout with struct
_CONTIGUOUS = struct.Struct("<BBQQ")  # a layout body: version, class, data address, size
_COMPACT = struct.Struct("<BBH")  # a layout body: version, class, data size (then the data)


def proto_class(file: HDF5File, obj: ObjectHeader) -> int | None:
    """The storage class byte of ``obj``'s layout message (0 compact, 1 contiguous, 2 chunked),
    or None without one."""
    msg = obj._first(m.LAYOUT)
    if msg is None or msg[3] < 2:
        return None
    return int(file.buffer[msg[2] + 1])


def gather_le(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The unsigned little-endian ``width``-byte (2, 4 or 8) integers at byte offsets ``at`` of
    ``data`` (each at most ``len(data) - width``): gathered from a view of ``data`` as such ints
    at every byte offset (unaligned, no copy), one element per int where a gather of bytes
    takes ``width``."""
    if len(data) < width:
        return np.zeros(0, f"<u{width}")[at]  # (raises for any offset, as a gather of bytes does)
    return np.ndarray((len(data) - width + 1,), f"<u{width}", data, 0, (1,))[at]


def _advise(mm: mmap.mmap, advice: str, start: int = 0, length: int = 0) -> None:
    """``mm.madvise`` where the platform has it; advice is a hint, so failures are ignored."""
    flag = getattr(mmap, advice, None)
    if flag is None or not hasattr(mm, "madvise"):
        return
    try:
        if length:
            mm.madvise(flag, start, length)
        else:
            mm.madvise(flag)
    except (OSError, ValueError):
        pass


def _check_not_truncated(eof_address: int | None, size: int) -> None:
    """A file shorter than its superblock's end-of-file address lost its end: say so up front,
    rather than as the first object found outside it. (JLD2 records the end as an absolute
    offset, libhdf5 relative to the base address; the smaller reading, this one, is taken.)"""
    if eof_address is not None and eof_address > size:
        raise FormatError(f"truncated: {size} bytes, the superblock says {eof_address}", offset=size)


class Refused(Exception):  # (not an error: a caller's choice, see HDF5File's refuse)
    """Raised by :class:`HDF5File` when its ``refuse`` said no to the file's bytes."""


class HDF5File(ClosingFile):
    """A read-only HDF5 file, memory-mapped.

    Args:
        source: a path, or the file's bytes (for tests and fuzzing).
        limits: safety limits (see :class:`treexchange.Limits`).
        verify_checksums: check superblock, object header and other metadata checksums. Off by
            default because JLD2 itself ignores them.
        refuse: asked of the file's bytes once they are mapped, before anything is parsed: when
            it says True, the file is closed and :class:`Refused` raised (``treexchange.open``
            tells BSON files apart this way, without opening a path twice).
        header_type: the class of the object headers made (a subclass of :class:`ObjectHeader`
            with the same constructor; the JLD2 reader's carries its description of the object).

    Addresses are *relative* (what links, references and heap IDs hold); ``absolute(addr)``
    gives the file offset. Objects are parsed once and cached by address.

    Example:
        >>> import h5py, io, numpy as np
        >>> bio = io.BytesIO()
        >>> with h5py.File(bio, "w") as f:
        ...     _ = f.create_dataset("x", data=np.arange(6, dtype="<i4").reshape(2, 3))
        >>> with HDF5File(bio.getvalue()) as h5:
        ...     obj = h5.object(h5.root.links()["x"])
        ...     obj.dataspace.dims, np.frombuffer(h5.raw_data(obj), "<i4").tolist()
        ((2, 3), [0, 1, 2, 3, 4, 5])
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | bytes | bytearray | memoryview,
        *,
        limits: Limits = DEFAULT_LIMITS,
        verify_checksums: bool = False,
        header_type: type[ObjectHeader] = ObjectHeader,
        refuse: Callable[[memoryview], bool] | None = None,
    ) -> None:
        self.limits = limits
        self._decoded: dict[int, int] = {}  # datasets decoded so far (offset -> bytes), see charge_decoded
        self._decoded_total = 0
        self._header_type = header_type
        self.verify_checksums = verify_checksums
        self._mmap: mmap.mmap | None = None
        self._fh: Any = None  # the open file, for plain reads (read_into); None for bytes
        self._fh_lock = threading.Lock()  # seek + readinto where os.preadv is missing
        self._from_path = not isinstance(source, (bytes, bytearray, memoryview))
        self._random_until: int | None = None  # objects parsed before MADV_RANDOM is lifted
        if isinstance(source, (bytes, bytearray, memoryview)):
            self.buffer = (
                memoryview(source).cast("B") if isinstance(source, memoryview) else memoryview(source)
            )
            self.name = "<bytes>"
        else:
            self.name = os.fspath(source)
            # The file stays open (unbuffered) for read_into: the map and the plain reads then
            # see the same file even if the name is replaced or deleted while it is open.
            fh = open(self.name, "rb", buffering=0)
            try:
                size = os.fstat(fh.fileno()).st_size
                if size == 0:
                    raise WrongFormatError("not an HDF5 file (empty file)", offset=0)
                self._mmap = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            except BaseException:
                fh.close()
                raise
            self._fh = fh
            # closed with the object if close() is never called (no ResourceWarning)
            self._fh_finalizer = weakref.finalize(self, fh.close)
            if size > _RANDOM_ABOVE:
                # Metadata reads are small and scattered between the arrays: with the default
                # read-around, every object-header fault in a cold file reads read_ahead_kb
                # (8 MiB on the development VM) around it -- a cold load of 200 headers in a
                # 1 GiB file read most of the file (0.8 s instead of 0.04 s). Bulk reads ask
                # for their ranges through prefetch(); object() reverts to the default once
                # headers turn out to be dense (many small arrays), where read-around pays.
                _advise(self._mmap, "MADV_RANDOM")
                self._random_until = size // _DENSE_METADATA
            self.buffer = memoryview(self._mmap)
        self.size = len(self.buffer)
        if refuse is not None and refuse(self.buffer):
            self.close()
            raise Refused
        try:
            with in_file(self.name if self._from_path else None):
                sb = read_superblock(self.buffer, verify_checksum=verify_checksums)
                _check_not_truncated(sb.eof_address, self.size)
        except BaseException:
            self.close()
            raise
        self.superblock = sb
        self.base = sb.base
        self.userblock = bytes(self.buffer[: sb.offset])
        self.superblock_version = sb.version
        self.root_address = sb.root_address
        self.offset_size = sb.offset_size
        self.length_size = sb.length_size
        self._wide = self.offset_size == 8 and self.length_size == 8  # (raw_location's fast path)
        self._objects: dict[int, ObjectHeader] = {}
        # headers known alike to a remembered one (address -> that one), not made yet
        self._vouched: dict[int, ObjectHeader] = {}
        # large groups of them not entered in _vouched yet (see vouch_as), and how many
        self._pending: list[tuple[list[int], ObjectHeader]] = []
        self._pending_n = 0
        self._widths = self._cursor(0)  # buffer and field widths for read_messages
        self._types: dict[int, H5Type] = {}
        self._memos: dict[str, dict[bytes, Any]] = _file_memos(limits)
        # attribute messages decoded but for their data, by their bytes (see parse_attribute)
        self.attribute_forms: m.AttributeForms = {}
        self._resolving: set[int] = set()
        # compounds decoded so far, found again by their bytes (nested structs: see parse_datatype)
        self.known_compounds = KnownCompounds()
        self._heaps: dict[int, GlobalHeapCollection] = {}
        self._links: dict[int, list[m.Link]] = {}
        # headers alike but for their data address, parsed once (not when checksums are
        # verified: they cover the bytes the memo leaves out)
        self._headers = None if verify_checksums else HeaderMemo()

    # --- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Release the memory map.

        Views handed out (``raw_data`` slices, attribute data) keep the map alive: if any is still
        referenced, the map is closed by the garbage collector once they are gone.
        """
        # Drop the caches that hold views of the map (attribute data, heaps, header memo), so
        # the map can be closed now rather than when the garbage collector breaks the cycles
        # they sit in.
        self._objects, self._types, self._heaps, self._links = {}, {}, {}, {}
        self._vouched = {}
        self._pending, self._pending_n = [], 0
        self._memos = _file_memos(self.limits)
        self.attribute_forms = {}
        self.known_compounds = KnownCompounds()
        if getattr(self, "_headers", None) is not None:  # (absent when __init__ failed early)
            self._headers = HeaderMemo()
        if self._fh is not None:
            fh, self._fh = self._fh, None
            self._fh_finalizer.detach()
            fh.close()
        if self._mmap is not None:
            mm, self._mmap = self._mmap, None
            try:
                self.buffer.release()
                mm.close()
            except BufferError:
                pass  # exported views still exist; GC closes the map after them

    # --- addresses ---------------------------------------------------------------------------
    def absolute(self, address: int) -> int:
        """Absolute file offset of a relative address (``address + base``).

        Example:
            >>> import h5py, io
            >>> bio = io.BytesIO()
            >>> h5py.File(bio, "w", userblock_size=512).close()
            >>> HDF5File(bio.getvalue()).absolute(48)
            560
        """
        return address + self.base

    def _cursor(self, pos: int, end: int | None = None) -> Cursor:
        return Cursor(self.buffer, pos, end, offset_size=self.offset_size, length_size=self.length_size)

    # --- objects -----------------------------------------------------------------------------
    @property
    def root(self) -> ObjectHeader:
        """The root group's object header."""
        return self.object(self.root_address)

    def object(self, address: int) -> ObjectHeader:
        """The object header at relative ``address`` (parsed once, then cached)."""
        obj = self._objects.get(address)
        if obj is not None:
            return obj
        return self._new_object(address, _UNSET)

    def first_of_group(self, address: int) -> ObjectHeader:
        """:meth:`object`, for the first of a group of headers about to be compared with it
        (:meth:`HeaderMemo.alike`): the groups :meth:`vouch_as` left for later stay so (a
        walk's next group starts among the headers of the last one's)."""
        obj = self._objects.get(address)
        if obj is not None:
            return obj
        return self._new_object(address, _UNSET, pending=False)

    def _new_object(
        self, address: int, first: tuple[int, int, int] | None, *, pending: bool = True
    ) -> ObjectHeader:
        """:meth:`object` of a header not made yet. ``first``: its first chunk when the header
        memo was asked already and knew no header alike (:meth:`alike_of`), else ``_UNSET``.
        ``pending=False``: the groups :meth:`vouch_as` left for later are not entered to look
        for it there (it is parsed if it is there: the same header, and entering them leaves
        out what is parsed by then)."""
        objects = self._objects
        offset = address + self.base
        proto = self._vouched.pop(address, None)
        if proto is None and pending and self._pending:
            proto = self.enter_vouched().pop(address, None)
        if proto is not None:  # alike to a remembered header (checked by vouch or alike_of)
            obj = objects[address] = proto._clone_at(address, offset)
            return obj
        if address < 0 or offset >= self.size:
            raise FormatError(f"object address {address} lies outside the file", offset=offset)
        if self._headers_counted() >= self.limits.max_objects:
            raise LimitError(f"more than max_objects={self.limits.max_objects} object headers", offset=offset)
        try:
            memo = self._headers
            if memo is not None:
                rebuilt, chunk0 = memo.rebuild(self, address, offset) if first is _UNSET else (None, first)
                if rebuilt is None:
                    obj = self._parse_object(address, offset, chunk0)
                    memo.remember(obj, 0 if chunk0 is None else chunk0[2])
                else:
                    obj = rebuilt
            else:
                obj = self._parse_object(address, offset)
        except TreexchangeError:
            raise
        except FORMAT_ERRORS as err:
            # what format_errors does, without a context manager per object (a hot path)
            raise malformed(err, offset) from err
        objects[address] = obj
        if self._random_until is not None and len(self._objects) > self._random_until:
            self._random_until = None
            if self._mmap is not None:
                _advise(self._mmap, "MADV_NORMAL")
        return obj

    def alike_of(self, address: int) -> ObjectHeader:
        """The object header at relative ``address``, or a header alike to it but for its
        layout body (see :mod:`._headermemo`): the same messages at shifted positions, so the
        same datatype, dataspace, attributes, kind -- everything but where the data lie.

        For readers that want to know what an object is without keeping a header object per
        dataset (a lazy walk over 100,000 arrays): no object is made or cached when the memo
        knows the header's form; the header's address is remembered with the form found, so
        :meth:`object` later rebuilds it at once. Otherwise, :meth:`object`.
        """
        obj = self._objects.get(address)
        if obj is not None:
            return obj
        proto = self.vouched_for(address)
        if proto is not None:
            return proto
        memo = self._headers
        offset = address + self.base
        if (
            memo is not None
            and 0 <= address
            and offset < self.size
            and self._headers_counted() < self.limits.max_objects
        ):
            try:
                proto, chunk0 = memo.find(self, offset)
            except (TreexchangeError, *FORMAT_ERRORS):
                return self.object(address)  # object() says what is wrong, in its words
            if proto is not None:
                self._vouched[address] = proto
                return proto
            return self._new_object(address, chunk0)  # (the memo asked once, not again)
        return self.object(address)

    def vouch(self, addresses: np.ndarray) -> None:
        """Check many object headers at once (:meth:`alike`) and remember for each one found
        alike to a remembered header which one it is, for :meth:`alike_of` and :meth:`object`."""
        base = self.base
        for proto, offsets in self.alike(addresses):
            # in C: every address of the group, less those made already (a walk vouches for
            # thousands of headers at once)
            self.vouch_as((offsets - base).tolist(), proto)

    def headers_read(self) -> dict[int, ObjectHeader]:
        """The object headers read so far, by relative address: what reading reached (a header
        known alike to a parsed one, :meth:`alike_of`, is given as that one)."""
        return {**self.enter_vouched(), **self._objects}

    def _headers_counted(self, more: int = 0) -> int:
        """How many object headers are parsed or vouched for, plus ``more`` (the ``max_objects``
        count). The groups :meth:`vouch_as` left for later are entered first when the count
        could reach the bound (an address vouched for twice, or parsed meanwhile, counts once
        only once entered): the same count, and the same errors, as with every group entered."""
        n = len(self._objects) + len(self._vouched) + more
        if self._pending and n + self._pending_n >= self.limits.max_objects:
            self.enter_vouched()
            return len(self._objects) + len(self._vouched) + more
        return n + self._pending_n

    def vouched_for(self, address: int) -> ObjectHeader | None:
        """The header :meth:`vouch_as` remembered as alike to the one at relative ``address``,
        if any (``_vouched``, with the groups not entered yet entered first when it is not there)."""
        proto = self._vouched.get(address)
        if proto is None and self._pending:
            proto = self.enter_vouched().get(address)
        return proto

    def enter_vouched(self) -> dict[int, ObjectHeader]:
        """``_vouched`` with every group :meth:`vouch_as` left for later entered, in the order they
        were vouched for."""
        pending, self._pending, self._pending_n = self._pending, [], 0
        for addresses, proto in pending:
            self._vouch_now(addresses, proto)
        return self._vouched

    def vouch_as(self, addresses: list[int], proto: ObjectHeader) -> None:
        """Remember ``proto`` as the header alike to each of the headers at relative
        ``addresses`` that is not parsed (those found so by :meth:`alike`; the list is kept,
        not copied: the caller leaves it as it is).

        A large group is kept as it is and entered in ``_vouched`` only when something looks
        there for an address it does not hold (:meth:`vouched_for`, :meth:`object`), or counts
        the headers (:meth:`_headers_counted`): a listing of a Dict's leaves, which has their
        descriptions already, never does (entering 1,000 addresses costs ~32 µs, 1-3 % of one).
        (An address vouched for twice is vouched for as alike to headers alike to each other:
        which of them it ends up with does not matter.)"""
        if len(addresses) >= _VOUCH_LATER:
            self._pending.append((addresses, proto))
            self._pending_n += len(addresses)
            return
        self._vouch_now(addresses, proto)

    def _vouch_now(self, addresses: list[int], proto: ObjectHeader) -> None:
        """:meth:`vouch_as`, at once: in C, as one update, when none is parsed (the usual case: a
        walk's first look at them); from pairs, which is 2-3 times faster than from a
        ``dict.fromkeys``."""
        vouched, objects = self._vouched, self._objects
        if len(objects) <= len(addresses):
            # Few headers parsed (a walk's first look: the one HeaderMemo.alike parsed, a few
            # types): all vouched for, then the parsed ones dropped, each of them a lookup --
            # not a pass over the addresses (an address is never in both: object() pops it).
            vouched.update(zip(addresses, repeat(proto)))
            for address in objects:
                vouched.pop(address, None)
            return
        if not objects.keys().isdisjoint(addresses):
            addresses = [a for a in addresses if a not in objects]
        vouched.update(zip(addresses, repeat(proto)))

    def occurrences(self, needle: bytes, start: int = 0) -> Iterator[int]:
        """The absolute offsets of ``needle`` in the file from ``start`` on, in order (a search
        of the memory map, no copy of the file; a file given as bytes is copied once)."""
        haystack: Any = self._mmap if self._mmap is not None else bytes(self.buffer)
        at = haystack.find(needle, start)
        while at >= 0:
            yield at
            at = haystack.find(needle, at + 1)

    def _parse_object(
        self, address: int, offset: int, chunk0: tuple[int, int, int] | None = None
    ) -> ObjectHeader:
        version, messages = read_messages(
            self._widths, offset, self.base, self.limits, verify_checksums=self.verify_checksums, first=chunk0
        )
        return self._header_type(self, address, offset, version, messages)

    def _memo(self, table: str, msg: RawMessage, parse: Callable[[RawMessage], T]) -> T:
        """Decode ``msg`` with ``parse`` once per distinct body: for messages whose meaning is
        their bytes alone (datatype, dataspace, filter pipeline, shared datatype -- the body is
        the committed type's address); decoded values are immutable.

        Only small bodies are remembered, and at most ``_MEMO_ENTRIES`` per table, so a hostile
        file cannot make the memo hold more than a few MiB.
        """
        _, _, offset, size = msg
        if size > _MEMO_BODY_BYTES:
            return parse(msg)
        memo = self._memos[table]
        key = bytes(self.buffer[offset : offset + size])
        value = memo.get(key)
        if value is None:
            value = parse(msg)
            n = len(memo)
            if n >= _SHARED_ENTRIES and table in _SHARED_TABLES and memo is _shared_table(self.limits, table):
                memo.clear()  # (shared with other files: start afresh rather than stop learning)
                n = 0
            if n < _MEMO_ENTRIES:
                memo[key] = value
        return value  # type: ignore[no-any-return]

    def _committed_type(self, address: int) -> H5Type:
        """The datatype of the committed datatype object at ``address``, ``committed_at`` set."""
        t = self._types.get(address)
        if t is not None:
            return t
        if address in self._resolving:
            raise FormatError("committed datatype refers to itself", offset=self.absolute(address))
        if len(self._resolving) > min(self.limits.max_depth, 32):
            raise LimitError("committed datatypes nested too deeply", offset=self.absolute(address))
        self._resolving.add(address)
        try:
            obj = self.object(address)
            dt = obj.datatype
        finally:
            self._resolving.discard(address)
        if dt is None:
            raise FormatError("shared datatype points to an object without a datatype", offset=obj.offset)
        t = dt.committed_as(address)
        self._types[address] = t
        return t

    # --- groups ------------------------------------------------------------------------------
    def link_messages(self, obj: ObjectHeader) -> list[m.Link]:
        """Every link of a group (hard, soft, external) in link order; see ObjectHeader.links."""
        cached = self._links.get(obj.address)
        if cached is None:
            with format_errors(obj.offset):
                cached = group_links(self, obj)
            self._links[obj.address] = cached
        return list(cached)

    def _dense_attributes(self, info: m.AttributeInfo) -> dict[str, Attribute]:
        return dense_attributes(self, info)

    # --- data --------------------------------------------------------------------------------
    def _stored_range(self, obj: ObjectHeader, shift: int = 0) -> tuple[int | None, int] | None:
        """``(absolute data offset or None if undefined, stored bytes)`` of a compact or
        contiguous layout message of version 3-5 with 8-byte fields -- the layouts of nearly
        every dataset JLD2 writes -- unpacked straight from the message (as ``parse_layout``'s
        own fast path reads them, with the same checks) without a ``Layout`` object per
        dataset; None for every other layout (and no layout), which take the general path.
        ``shift``: of the header alike to ``obj`` (:meth:`alike_of`) at ``obj.offset + shift``.
        """
        msg = obj._first(m.LAYOUT)
        if msg is None:
            return None
        _, _, at, size = msg
        at += shift
        buf = self.buffer
        if size < 4 or not 3 <= buf[at] <= 5:
            return None
        cls = buf[at + 1]
        if cls == 1 and size >= 18 and self._wide:
            addr, stored = _ADDR_LEN.unpack_from(buf, at + 2)
            return (None if addr == _UNDEFINED_ADDR else addr + self.base), stored
        if cls == 0:
            (stored,) = _U16.unpack_from(buf, at + 2)
            if stored > size - 4:
                raise FormatError(f"truncated: need {stored} byte(s), {size - 4} left", offset=at + 4)
            return at + 4, stored
        return None

    def alike(self, addresses: np.ndarray) -> list[tuple[ObjectHeader, np.ndarray]]:
        """Object headers at relative ``addresses`` (unsigned ints) sorted into groups of headers
        alike but for their layout body: ``[(a parsed header of the group, the group's
        absolute offsets)]`` (see :meth:`HeaderMemo.alike`). For readers that then take what
        they need from many headers at once (:meth:`stored_ranges`) instead of parsing each.
        Empty when checksums are verified (no memo).
        """
        memo = self._headers
        if memo is None or not len(addresses):
            return []
        rel = np.asarray(addresses, np.uint64)
        rel = rel[rel < np.uint64(max(self.size - self.base, 0))]
        groups = memo.alike(self, rel.astype(np.int64) + self.base)
        found = sum(len(offsets) for _, offsets in groups)
        if self._headers_counted(found) > self.limits.max_objects:
            # each is an object header the reader visits, parsed or not
            raise LimitError(f"more than max_objects={self.limits.max_objects} object headers")
        return groups

    def stored_ranges(
        self, proto: ObjectHeader, offsets: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where the data of headers alike to ``proto`` at absolute ``offsets`` lie, in bulk:
        ``(which, data offsets, stored bytes)`` for those of them whose layout is compact or
        contiguous in the form :meth:`_stored_range` reads (``which`` selects them from
        ``offsets``; the others are left to the usual path). The same numbers and checks as
        :meth:`_stored_range`; undefined addresses are left out.
        """
        none = (np.zeros(len(offsets), bool), np.zeros(0, np.int64), np.zeros(0, np.int64))
        msg = proto._first(m.LAYOUT)
        if msg is None or self._headers is None:
            return none
        _, _, at, size = msg
        if len(offsets) <= _FEW_RANGES:
            return self._few_ranges(proto, offsets, at - proto.offset, size)
        body = offsets + (at - proto.offset)
        data = np.frombuffer(self.buffer, np.uint8)
        try:
            version, cls = data[body], data[body + 1]
            ok = (version >= 3) & (version <= 5)
            if size >= 18 and self._wide and proto_class(self, proto) == 1:
                ok &= cls == 1
                addr = gather_le(data, body + 2, 8)
                stored = gather_le(data, body + 10, 8)
                ok &= addr != np.uint64(_UNDEFINED_ADDR)
                ok &= addr < np.uint64(self.size)  # (data offsets checked by the caller; no overflow)
                which = np.flatnonzero(ok)
                return ok, addr[which].astype(np.int64) + self.base, stored[which].astype(np.int64)
            if size >= 4 and proto_class(self, proto) == 0:
                ok &= cls == 0
                stored = gather_le(data, body + 2, 2).astype(np.int64)
                ok &= stored <= size - 4
                which = np.flatnonzero(ok)
                return ok, body[which] + 4, stored[which]
            return none
        finally:
            del data

    def _few_ranges(
        self, proto: ObjectHeader, offsets: np.ndarray, rel: int, size: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`stored_ranges` of a few headers (layout body at ``rel`` from each, ``size``
        bytes), each read with ``struct``: the same numbers and checks, without numpy's passes
        of fixed cost (a Dict of a few Dicts)."""
        buf, listed = self.buffer, offsets.tolist()
        ok: list[bool] = []
        data_at: list[int] = []
        stored: list[int] = []
        if size >= 18 and self._wide and proto_class(self, proto) == 1:
            for offset in listed:
                body = offset + rel
                version, cls, addr, n = _CONTIGUOUS.unpack_from(buf, body)
                good = 3 <= version <= 5 and cls == 1 and addr != _UNDEFINED_ADDR and addr < self.size
                ok.append(good)
                if good:
                    data_at.append(addr + self.base)
                    stored.append(n if n < 1 << 63 else n - (1 << 64))  # (as numpy's int64 view)
        elif size >= 4 and proto_class(self, proto) == 0:
            for offset in listed:
                body = offset + rel
                version, cls, n = _COMPACT.unpack_from(buf, body)
                good = 3 <= version <= 5 and cls == 0 and n <= size - 4
                ok.append(good)
                if good:
                    data_at.append(body + 4)
                    stored.append(n)
        else:
            ok = [False] * len(listed)
        return np.array(ok, bool), np.array(data_at, np.int64), np.array(stored, np.int64)

    def raw_location(
        self, obj: ObjectHeader, *, keep: bool = True, element_size: int | None = None
    ) -> tuple[int, int] | None:
        """``(absolute offset, nbytes)`` of the raw data when it is stored in one piece, unfiltered
        (compact or contiguous layout, or one unfiltered chunk that covers the whole dataset);
        else None. ``nbytes`` is what the dataspace and datatype need (never more than stored).

        ``keep=False``: do not keep the decoded layout on ``obj`` (for a look at a small
        dataset that is not read: one object less for the garbage collector per dataset).
        ``element_size``: as for :meth:`raw_data`.
        """
        fast = self._stored_range(obj) if obj._layout is _UNSET else None
        if fast is not None:
            data_at, stored = fast
            nbytes = self._expected_bytes(obj, element_size)
            if data_at is None or nbytes == 0:
                return None
            self._check_stored(obj, data_at, stored, nbytes)
            return data_at, nbytes
        layout = obj.layout if keep else obj.peek_layout()
        if layout is None:
            return None
        nbytes = self._expected_bytes(obj, element_size)
        if layout.kind in ("compact", "contiguous"):
            if layout.data_offset is None or nbytes == 0:
                return None
            self._check_stored(obj, layout.data_offset, layout.data_size, nbytes)
            return layout.data_offset, nbytes
        # only chunked datasets need _chunks (and its filters): 5 ms of `import treexchange` spared
        from ._chunks import single_unfiltered_chunk

        with format_errors(obj.offset):
            return single_unfiltered_chunk(self, obj, nbytes)

    def raw_data(self, obj: ObjectHeader, element_size: int | None = None) -> memoryview | bytes:
        """The dataset's raw element bytes in storage (HDF5, C) order.

        Compact and contiguous data come back as a zero-copy view of the file; chunked data are
        assembled (filters applied) into new bytes. Null dataspaces and undefined addresses give
        ``b""``. ``element_size`` reads each element as that many bytes instead of the datatype's
        size (JLD2 reads old files' strings as their bytes this way).
        """
        fast = self._stored_range(obj) if obj._layout is _UNSET else None
        if fast is not None and m.EXTERNAL_FILES not in obj._types:
            data_at, stored = fast
            nbytes = self._expected_bytes(obj, element_size)
            if data_at is None or nbytes == 0:
                return b""
            self._check_stored(obj, data_at, stored, nbytes)
            self.prefetch(data_at, nbytes)  # the caller reads (or copies) it all
            return self.buffer[data_at : data_at + nbytes]
        layout = obj.layout
        if layout is None:
            raise FormatError("object is not a dataset (no layout message)", offset=obj.offset)
        nbytes = self._expected_bytes(obj, element_size)
        if nbytes == 0:
            return b""
        if obj.find(m.EXTERNAL_FILES) is not None:
            # data kept in other files: the layout address is undefined, yet the data exist
            raise UnsupportedError("datasets stored in external files are not supported", offset=obj.offset)
        if layout.kind in ("compact", "contiguous"):
            if layout.data_offset is None:
                return b""
            self._check_stored(obj, layout.data_offset, layout.data_size, nbytes)
            self.prefetch(layout.data_offset, nbytes)  # the caller reads (or copies) it all
            return self.buffer[layout.data_offset : layout.data_offset + nbytes]
        if nbytes > self.limits.max_array_bytes:
            raise LimitError(
                f"dataset needs {nbytes} bytes, more than max_array_bytes={self.limits.max_array_bytes}",
                offset=obj.offset,
            )
        # Every stored chunk decodes whole, so one chunk is decoded even for a smaller dataspace
        # (a lying dataspace must not hide a huge chunk from the budget).
        chunk_bytes = obj.datatype.size if obj.datatype is not None else 1
        for d in layout.chunk_dims[:-1]:
            chunk_bytes *= d
        self.charge_decoded(obj.offset, max(nbytes, chunk_bytes))
        from ._chunks import read_chunked  # only chunked datasets need it (see raw_location)

        with format_errors(obj.offset):
            return read_chunked(self, obj, nbytes)

    @property
    def filters_seen(self) -> bool:
        """Whether a dataset read so far had a filter pipeline (compressed data): the pipelines
        decoded are remembered by body (``_memo``; theirs are a few bytes)."""
        return bool(self._memos[MEMO_TABLES[2]])

    @property
    def filter_pipelines_seen(self) -> frozenset[bytes]:
        """The bodies of the filter pipeline messages of the datasets read so far (which filters,
        with which client values: what ``convert --keep-producer`` compresses with again)."""
        return frozenset(self._memos[MEMO_TABLES[2]])

    def charge_decoded(self, offset: int, nbytes: int) -> None:
        """Count ``nbytes`` that the dataset at ``offset`` produces without storing them
        (decompressed chunks, fill values) against ``Limits.max_decoded_bytes``, before they are
        allocated: per array, and in total for the file (each dataset once, however often read).

        Raises:
            LimitError: the array alone, or all decoded arrays together, exceed the budget.
        """
        budget = self.limits.decoded_for(self.size)
        if offset in self._decoded:
            return
        if nbytes > budget:
            raise LimitError(
                f"array decodes to {nbytes} bytes from a {self.size}-byte file, more than "
                f"max_decoded_bytes={budget} (pass treexchange.Limits(max_decoded_bytes=...) to allow it)",
                offset=offset,
            )
        total = self._decoded_total + nbytes
        if total > budget:
            raise LimitError(
                f"decoded arrays of this file total {total} bytes, more than max_decoded_bytes={budget}",
                offset=offset,
            )
        self._decoded[offset] = nbytes
        self._decoded_total = total

    def fileno(self) -> int | None:
        """The open file's descriptor (``None`` for bytes or once closed)."""
        return None if self._fh is None else int(self._fh.fileno())

    def read_into(self, offset: int, out: memoryview) -> None:
        """Fill ``out`` (a writable byte buffer) with the file's bytes at absolute ``offset``.

        Plain reads (``os.preadv``), not the memory map: one system call that streams from the
        disk, where touching a cold map waits on one page fault after another. For a file given
        as bytes, a copy. The range must lie within the file as it was opened; a file truncated
        since then raises FormatError.

        Example:
            >>> import h5py, io, numpy as np
            >>> bio = io.BytesIO()
            >>> h5py.File(bio, "w").close()
            >>> buf = bytearray(8)
            >>> with HDF5File(bio.getvalue()) as h5:
            ...     h5.read_into(0, memoryview(buf))
            >>> bytes(buf)
            b'\\x89HDF\\r\\n\\x1a\\n'
        """
        n = out.nbytes
        if offset < 0 or offset + n > self.size:
            raise FormatError(f"{n} bytes at {offset} lie outside the file", offset=offset)
        fh = self._fh
        if fh is None:
            if self._from_path:
                raise ValueError("I/O operation on a closed file")
            out[:] = self.buffer[offset : offset + n]
            return
        done = 0
        while done < n:  # more than one call only for reads over 2 GiB (Linux caps one read)
            view = out[done:]
            if hasattr(os, "preadv"):
                got = os.preadv(fh.fileno(), [view], offset + done)
            else:
                with self._fh_lock:
                    fh.seek(offset + done)
                    got = fh.readinto(view)
            if not got:
                raise FormatError(
                    "the file ended early (truncated since it was opened?)", offset=offset + done
                )
            done += got

    def prefetch(self, offset: int, nbytes: int) -> None:
        """Ask the kernel to start reading ``[offset, offset + nbytes)`` into the page cache.

        Large files are mapped ``MADV_RANDOM`` (see ``__init__``), so whoever is about to read
        a large range whole (chunks, contiguous data) asks for it here. A no-op for files
        given as bytes and where ``madvise`` is missing.
        """
        if self._mmap is None or nbytes < _PREFETCH_MIN or offset < 0 or offset >= self.size:
            return
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        _advise(self._mmap, "MADV_WILLNEED", start, min(offset + nbytes, self.size) - start)

    def _expected_bytes(self, obj: ObjectHeader, element_size: int | None = None) -> int:
        space, dtype = obj.dataspace, obj.datatype
        if space is None or dtype is None:
            raise FormatError("dataset lacks a dataspace or datatype message", offset=obj.offset)
        return space.count * (dtype.size if element_size is None else element_size)

    def _check_stored(self, obj: ObjectHeader, offset: int, stored: int, nbytes: int) -> None:
        if stored < nbytes:
            raise FormatError(
                f"dataset stores {stored} bytes but its dataspace and datatype need {nbytes}",
                offset=obj.offset,
            )
        if offset + nbytes > self.size:
            raise FormatError(f"dataset data ({nbytes} bytes) runs past the end of the file", offset=offset)

    # --- global heap -------------------------------------------------------------------------
    def heap_collection(
        self, collection_address: int, expect: tuple[np.ndarray, np.ndarray] | None = None
    ) -> GlobalHeapCollection:
        """The global heap collection at a relative address (parsed once per file).
        ``expect``: the indices and sizes of the objects about to be read (see
        :class:`GlobalHeapCollection`)."""
        heap = self._heaps.get(collection_address)
        if heap is None:
            offset = self.absolute(collection_address)
            with format_errors(offset):
                heap = GlobalHeapCollection(self._cursor(0), offset, expect)
            self._heaps[collection_address] = heap
        return heap

    def global_heap_object(self, collection_address: int, index: int) -> memoryview:
        """The bytes of object ``index`` in the global heap collection at a relative address."""
        heap = self._heaps.get(collection_address)
        if heap is None:
            heap = self.heap_collection(collection_address)
        at, n = heap.get(index)
        return self.buffer[at : at + n]

    def vlen_at(self, buf: Any, off: int) -> memoryview:
        """:meth:`read_vlen` of the 16-byte vlen element at ``buf[off:off + 16]``, without
        slicing it out first (type names and parameter lists: every committed type has them).

        Raises:
            FormatError: fewer than 16 bytes there, or where the element points is damaged.
        """
        if len(buf) - off < 16 or off < 0:
            raise FormatError("truncated variable-length element")
        if self.offset_size != 8:
            return self.read_vlen(buf[off : off + 16])
        _, addr, index = _VLEN.unpack_from(buf, off)
        if (addr == 0 and index == 0) or addr == _UNDEFINED_ADDR:
            return memoryview(b"")
        heap = self._heaps.get(addr)
        if heap is None:
            heap = self.heap_collection(addr)
        code = heap.objects.get(index)
        if code is None:
            at, n = heap.get(index)  # (raises: no such object)
            return self.buffer[at : at + n]
        at = code & OFFSET_MASK  # (GlobalHeapCollection.get, inline)
        return self.buffer[at : at + (code >> SIZE_SHIFT)]

    def read_vlen(self, element: bytes | memoryview) -> memoryview:
        """Follow a 16-byte vlen element (u32 count, collection address, u32 index) to its bytes.

        An all-zero element (an empty vlen) gives an empty view.

        Example:
            >>> import h5py, io
            >>> bio = io.BytesIO()
            >>> with h5py.File(bio, "w") as f:
            ...     f.attrs["name"] = "Core.Float32"
            >>> with HDF5File(bio.getvalue()) as h5:
            ...     bytes(h5.read_vlen(h5.root.attributes["name"].data))
            b'Core.Float32'
        """
        if self.offset_size == 8 and len(element) >= 16:
            _, addr, index = _VLEN.unpack_from(element, 0)
            if (addr == 0 and index == 0) or addr == _UNDEFINED_ADDR:
                return memoryview(b"")
            return self.global_heap_object(addr, index)
        raw = bytes(element)
        need = 4 + self.offset_size + 4
        if len(raw) < need:
            raise FormatError(f"vlen element has {len(raw)} bytes, needs {need}")
        addr = int.from_bytes(raw[4 : 4 + self.offset_size], "little")
        index = int.from_bytes(raw[4 + self.offset_size : need], "little")
        if addr == 0 and index == 0:
            return memoryview(b"")
        if addr == (1 << (8 * self.offset_size)) - 1:
            return memoryview(b"")
        return self.global_heap_object(addr, index)
