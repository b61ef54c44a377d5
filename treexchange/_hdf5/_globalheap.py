"""Global heap collections (``GCOL``): where variable-length data (vlen strings, sequences) live.

**Collection size convention.** The spec's "collection size" includes the 16-byte collection
header; JLD2 writes the size *without* it. We accept both by scanning objects from the first
one and stopping at the free-space object (index 0), at a header that does not fit, or at
``start + 16 + size`` (clipped to the file), whichever comes first. A spec-conformant collection
always ends with a free-space object or exactly at its end, so the extra 16 bytes of slack are
never read for it.
"""

from __future__ import annotations

import struct

import numpy as np

from .._errors import FormatError
from ._cursor import Cursor

_OBJECT_HEAD = struct.Struct("<HH4xQ")  # index, reference count, reserved, size (8-byte lengths)


SIZE_SHIFT = 48
"""``GlobalHeapCollection.objects`` holds ``size << SIZE_SHIFT | absolute offset`` per object: one
int, where a tuple per object would be one more object for the cyclic garbage collector to scan
(a file of many Dict keys has tens of thousands). Offsets lie inside the file, below 2**48."""
OFFSET_MASK = (1 << SIZE_SHIFT) - 1
_PREDICT_FROM = 16  # expected objects from which checking them in bulk pays


class GlobalHeapCollection:
    """One parsed collection: ``objects`` maps a heap object index to where it lies (see
    :data:`SIZE_SHIFT`; :meth:`get` gives ``(absolute offset, size)``)."""

    __slots__ = ("_pending", "objects", "offset")
    _pending: np.ndarray  # codes of objects 1..K whose dict is not made yet (known_lazily)
    objects: dict[int, int]
    offset: int

    def __init__(self, c: Cursor, offset: int, expect: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        """Parse the collection at absolute ``offset``. ``expect``: the indices and sizes of
        objects a reader is about to look up (the keys of a Dict), a guess at its first objects
        that :meth:`_predicted` checks in bulk before the object loop runs."""
        self.offset = offset
        self.objects: dict[int, int] = {}
        hc = c.at(offset)
        hc.signature(b"GCOL", "global heap collection")
        version = hc.u8()
        if version != 1:
            raise FormatError(f"unknown global heap version {version}", offset=offset + 4)
        hc.skip(3)
        size = hc.length()
        end = min(len(c.buf), offset + 16 + size) if size <= len(c.buf) else len(c.buf)
        if c.length_size == 8:
            if expect is None or not self._predicted(c.buf, hc.pos, end, *expect):
                self._scan(c.buf, hc.pos, end)
            return
        oc = c.at(hc.pos, end)
        header = 8 + oc.length_size
        while oc.remaining >= header:
            obj_at = oc.pos
            index = oc.u16()
            oc.u16()  # reference count
            oc.skip(4)
            n = oc.length()
            if index == 0:
                break  # free space: the rest of the collection
            if n > oc.remaining:
                raise FormatError(
                    f"global heap object {index} of {n} bytes runs past its collection", offset=obj_at
                )
            self.objects[index] = n << SIZE_SHIFT | oc.pos
            oc.skip(n)
            oc.pos = min(oc.end, oc.pos + (-n % 8))  # objects are padded to 8 bytes

    @classmethod
    def known(cls, offset: int, objects: dict[int, int]) -> GlobalHeapCollection:
        """The collection at ``offset`` whose ``objects`` were found in bulk, exactly as the
        scan finds them (:func:`treexchange._hdf5._heapbulk.predict_collections`)."""
        heap = cls.__new__(cls)
        heap.offset, heap.objects = offset, objects
        return heap

    @classmethod
    def known_lazily(cls, offset: int, codes: np.ndarray) -> GlobalHeapCollection:
        """:meth:`known` for a collection holding exactly the objects ``1..len(codes)`` at
        ``codes``: the dict of them is made on the first look at ``objects`` (the bulk parse of
        a Dict's keys has what it needs from the codes: most such collections are never looked
        at again)."""
        heap = cls.__new__(cls)
        heap.offset, heap._pending = offset, codes
        return heap

    def __getattr__(self, name: str) -> dict[int, int]:
        # only for ``objects`` of a collection made by known_lazily, not looked at before
        if name != "objects":
            raise AttributeError(name)
        codes = self._pending
        objects = self.objects = dict(zip(range(1, len(codes) + 1), codes.tolist()))
        return objects

    def _predicted(self, buf: memoryview, pos: int, end: int, indices: np.ndarray, sizes: np.ndarray) -> bool:
        """What :meth:`_scan` finds, without a Python step per object, when the collection
        begins with objects ``1, 2, ...`` of the ``sizes`` expected (a writer filling a fresh
        collection with a Dict's keys): where each object lies follows from the sizes before
        it, and every header there is compared, index and size, with what is expected, in one
        numpy pass. The objects after them are scanned as usual. False (nothing recorded) when
        any differs: then the scan decides, and reports what is wrong in its words.

        Exactly the scan's result: the scan reads the header at ``pos``, records it unless its
        index is 0 and moves to the padded end of its body; the headers checked here are the
        ones it reads, in order, each with a non-zero index and a body inside the collection.
        """
        n = len(indices)
        if n < _PREDICT_FROM or int(indices[0]) != 1 or not bool((np.diff(indices) == 1).all()):
            return False
        if int(sizes.max()) >= 1 << (63 - SIZE_SHIFT):  # (keys of 32 KiB and more: the scan)
            return False
        lengths = sizes.astype(np.int64)
        steps = 16 + lengths + (-lengths % 8)  # header, body, padding to 8 bytes
        heads = pos + np.concatenate(([0], np.cumsum(steps[:-1])))
        bodies = heads + 16
        if int(bodies[-1] + lengths[-1]) > end:  # (increasing: the last ends last)
            return False
        raw = np.frombuffer(buf, np.uint8)
        got = raw[heads[:, None] + np.arange(16)]
        del raw
        if not bool((got[:, :2].copy().view("<u2").ravel() == indices).all()):
            return False
        if not bool((got[:, 8:].copy().view("<u8").ravel() == sizes).all()):
            return False
        self.objects.update(zip(indices.tolist(), ((lengths << SIZE_SHIFT) | bodies).tolist()))
        self._scan(buf, min(end, int(heads[-1] + steps[-1])), end)
        return True

    def _scan(self, buf: memoryview, pos: int, end: int) -> None:
        """The object loop above for 8-byte lengths, one ``struct`` call per object (a file
        of many Dict keys has thousands of collections of hundreds of objects each)."""
        objects = self.objects
        unpack = _OBJECT_HEAD.unpack_from
        while end - pos >= 16:
            index, _refs, n = unpack(buf, pos)
            if index == 0:
                break  # free space: the rest of the collection
            body = pos + 16
            if n > end - body:
                raise FormatError(
                    f"global heap object {index} of {n} bytes runs past its collection", offset=pos
                )
            objects[index] = n << SIZE_SHIFT | body
            # objects are padded to 8 bytes; past ``end`` (by the padding at most) the loop stops
            # as it would at ``end`` (no min(): this loop runs per object of every collection)
            pos = body + n + (-n % 8)

    def get(self, index: int) -> tuple[int, int]:
        """``(absolute offset, size)`` of object ``index``."""
        try:
            code = self.objects[index]
        except KeyError:
            raise FormatError(f"global heap collection has no object {index}", offset=self.offset) from None
        return code & OFFSET_MASK, code >> SIZE_SHIFT
