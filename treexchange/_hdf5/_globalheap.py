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

from .._errors import FormatError
from ._cursor import Cursor

_OBJECT_HEAD = struct.Struct("<HH4xQ")  # index, reference count, reserved, size (8-byte lengths)


SIZE_SHIFT = 48
"""``GlobalHeapCollection.objects`` holds ``size << SIZE_SHIFT | absolute offset`` per object: one
int, where a tuple per object would be one more object for the cyclic garbage collector to scan
(a file of many Dict keys has tens of thousands). Offsets lie inside the file, below 2**48."""
OFFSET_MASK = (1 << SIZE_SHIFT) - 1


class GlobalHeapCollection:
    """One parsed collection: ``objects`` maps a heap object index to where it lies (see
    :data:`SIZE_SHIFT`; :meth:`get` gives ``(absolute offset, size)``)."""

    __slots__ = ("latin1", "objects", "offset")

    def __init__(self, c: Cursor, offset: int) -> None:
        self.offset = offset
        self.objects: dict[int, int] = {}
        # (first byte, its objects' bytes as Latin-1 text): set by readers of many objects
        self.latin1: tuple[int, str] | None = None
        hc = c.at(offset)
        hc.signature(b"GCOL", "global heap collection")
        version = hc.u8()
        if version != 1:
            raise FormatError(f"unknown global heap version {version}", offset=offset + 4)
        hc.skip(3)
        size = hc.length()
        end = min(len(c.buf), offset + 16 + size) if size <= len(c.buf) else len(c.buf)
        if c.length_size == 8:
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
            pos = min(end, body + n + (-n % 8))  # objects are padded to 8 bytes

    def get(self, index: int) -> tuple[int, int]:
        """``(absolute offset, size)`` of object ``index``."""
        try:
            code = self.objects[index]
        except KeyError:
            raise FormatError(f"global heap collection has no object {index}", offset=self.offset) from None
        return code & OFFSET_MASK, code >> SIZE_SHIFT
