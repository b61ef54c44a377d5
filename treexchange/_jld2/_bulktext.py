"""Many variable-length strings at once: the keys of a large Dict, read in one pass.

A Dict of 100,000 entries stores each key as a 16-byte vlen element (count, global heap
collection address, object index) inside its Pair; decoding them one by one costs a chain of
calls per key. Here the elements are gathered with numpy, each collection is parsed once (as
:meth:`HDF5File.global_heap_object` does, with the same checks), and each collection's bytes are
decoded once as Latin-1 (one character per byte), so that a key is a slice of that text --
kept as it is when it is ASCII (the same characters UTF-8 gives), decoded from its bytes
otherwise. The result is what :func:`decode_text` gives for each element.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any, cast

import numpy as np

from .._hdf5 import HDF5File
from .._hdf5._globalheap import OFFSET_MASK, SIZE_SHIFT
from ._plans import decode_text

_UNDEFINED = (1 << 64) - 1


def vlen_texts(h5: HDF5File, buf: Any, offsets: np.ndarray) -> list[str] | None:
    """The texts of the vlen elements at ``buf[offsets[i]:]``; None when this file or these
    elements need the one-by-one path (4-byte offsets, empty strings, out-of-range offsets),
    which then reports whatever is wrong in its own words."""
    if h5.offset_size != 8 or not len(offsets):
        return None
    raw = np.frombuffer(buf, np.uint8)
    if int(offsets.min()) < 0 or int(offsets.max()) + 16 > len(raw):
        return None
    elements = raw[offsets[:, None] + np.arange(16)]
    counts = elements[:, :4].copy().view("<u4").ravel()  # a String's count: its bytes
    addresses = elements[:, 4:12].copy().view("<u8").ravel()
    indices = elements[:, 12:].copy().view("<u4").ravel()
    if bool(((addresses == 0) & (indices == 0)).any()) or bool((addresses == _UNDEFINED).any()):
        return None  # empty strings: rare as keys, left to the usual path
    runs = [0, *(np.flatnonzero(np.diff(addresses)) + 1).tolist(), len(addresses)]
    texts: list[str] = []
    for lo, hi in pairwise(runs):  # elements in a row that point into one collection
        expect = indices[lo:hi], counts[lo:hi]
        found = _collection_texts(h5, int(addresses[lo]), expect)
        if found is None:
            return None
        texts += found
    return texts


def _collection_texts(h5: HDF5File, address: int, expect: tuple[np.ndarray, np.ndarray]) -> list[str] | None:
    """The texts of objects ``expect[0]`` (of ``expect[1]`` bytes each, as the elements say)
    of the global heap collection at ``address``: each a slice of the collection's Latin-1
    text, all cut at once (``map`` over slices)."""
    heap = h5.heap_collection(address, expect)
    indices = expect[0].tolist()
    objects = heap.objects
    if heap.latin1 is None:  # once per collection (one holds the keys of many Dicts)
        # objects are kept in file order: the first begins the text, the last ends it
        first = next(iter(objects.values()), 0) & OFFSET_MASK
        last = next(reversed(objects.values()), 0)
        end = (last & OFFSET_MASK) + (last >> SIZE_SHIFT)
        heap.latin1 = (first, bytes(h5.buffer[first:end]).decode("latin-1"))
    start, text = heap.latin1
    found = list(map(objects.get, indices))
    if None in found:
        heap.get(indices[found.index(None)])  # raises the usual error
        return None
    codes = cast("list[int]", found)
    if max(codes) < 1 << 64:  # (sizes below 2**16: the codes fit in uint64)
        where = np.array(codes, np.uint64)
        at = (where & OFFSET_MASK).astype(np.int64) - start
        ends = at + (where >> SIZE_SHIFT).astype(np.int64)
        if int(at.min()) >= 0 and int(ends.max()) <= len(text):  # all within the text
            keys = list(map(text.__getitem__, map(slice, at.tolist(), ends.tolist())))
            if text.isascii():  # then every key is ASCII: the characters UTF-8 gives
                return keys
            return [key if key.isascii() else decode_text(key.encode("latin-1")) for key in keys]
    buffer = h5.buffer
    out = []
    for code in codes:  # objects out of order: each from its own bytes
        offset, n = code & OFFSET_MASK, code >> SIZE_SHIFT
        out.append(decode_text(buffer[offset : offset + n]))
    return out
