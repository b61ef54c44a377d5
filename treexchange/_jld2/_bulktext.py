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

from typing import Any

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
    elements = raw[offsets[:, None] + np.arange(4, 16)]
    addresses = elements[:, :8].copy().view("<u8").ravel()
    indices = elements[:, 8:].copy().view("<u4").ravel()
    if bool(((addresses == 0) & (indices == 0)).any()) or bool((addresses == _UNDEFINED).any()):
        return None  # empty strings: rare as keys, left to the usual path
    buffer = h5.buffer
    texts: list[str] = []
    append = texts.append
    current = -1
    objects: dict[int, int] = {}
    text, start, ascii_text = "", 0, False
    for address, index in zip(addresses.tolist(), indices.tolist()):
        if address != current:
            heap = h5.heap_collection(address)
            objects, current = heap.objects, address
            if heap.latin1 is None:  # once per collection (one holds the keys of many Dicts)
                # objects are kept in file order: the first begins the text, the last ends it
                first = next(iter(objects.values()), 0) & OFFSET_MASK
                last = next(reversed(objects.values()), 0)
                end = (last & OFFSET_MASK) + (last >> SIZE_SHIFT)
                heap.latin1 = (first, bytes(buffer[first:end]).decode("latin-1"))
            start, text = heap.latin1
            ascii_text = text.isascii()  # then every key cut from it is ASCII: no check per key
        code = objects.get(index)
        if code is None:
            h5.heap_collection(address).get(index)  # raises the usual error
            return None
        at, n = (code & OFFSET_MASK) - start, code >> SIZE_SHIFT
        key = text[at : at + n]
        if len(key) != n or at < 0:  # not within the text (objects out of order): its bytes
            at += start
            key = decode_text(buffer[at : at + n])
        elif not ascii_text and not key.isascii():
            key = decode_text(key.encode("latin-1"))
        append(key)
    return texts
