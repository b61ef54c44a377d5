"""Many variable-length strings at once: the keys of a large Dict, read in one pass.

A Dict of 100,000 entries stores each key as a 16-byte vlen element (count, global heap
collection address, object index) inside its Pair; decoding them one by one costs a chain of
calls per key. Here the elements are gathered with numpy; the collections not parsed yet are
parsed together from what the elements say (:func:`predict_collections`, with the checks of
the object-by-object parse; the others, and any it leaves, are parsed as
:meth:`HDF5File.global_heap_object` does); and every key's bytes are gathered into one buffer,
decoded at once and split. The result is what :func:`decode_text` gives for each element.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any, cast

import numpy as np

from .._hdf5 import HDF5File
from .._hdf5._globalheap import OFFSET_MASK, SIZE_SHIFT
from .._hdf5._heapbulk import predict_collections
from ._plans import decode_text

_UNDEFINED = (1 << 64) - 1
Offsets = range | np.ndarray
"""Where vlen elements lie in a buffer: a ``range`` when evenly spaced (one per Pair), else any."""
_GATHERED_MAX = 1 << 24  # bytes of text gathered at once (index arrays: 16 bytes per byte)


def vlen_texts(
    h5: HDF5File, buf: Any, offsets: Offsets, more: tuple[Any, Offsets] | None = None
) -> list[str] | None:
    """The texts of the vlen elements at ``buf[offsets[i]:]`` (then those of ``more``, another
    such buffer and offsets: an outer Dict's keys, which lie in the collections of its inner
    Dicts' keys); None when this file or these elements need the one-by-one path (4-byte
    offsets, empty strings, out-of-range offsets), which then reports whatever is wrong in its
    own words."""
    if h5.offset_size != 8 or not len(offsets):
        return None
    counts, addresses, indices = found_fields = _checked_fields(buf, offsets)
    if counts is None:
        return None
    if more is not None:
        counts2, addresses2, indices2 = _checked_fields(*more)
        if counts2 is None:
            return None
        counts, addresses, indices = (
            np.concatenate(pair) for pair in zip(found_fields, (counts2, addresses2, indices2))
        )
    if int(addresses.max()) == _UNDEFINED or (
        int(addresses.min()) == 0 and bool(((addresses == 0) & (indices == 0)).any())
    ):
        return None  # empty strings: rare as keys, left to the usual path
    found = predict_collections(h5, addresses, indices, counts)  # (collections not parsed yet)
    missing = np.flatnonzero(found == 0)
    if len(missing):  # in collections parsed before (or that the prediction left to the scan)
        runs = [0, *(np.flatnonzero(np.diff(addresses[missing])) + 1).tolist(), len(missing)]
        looked_up: list[int] = []
        for lo, hi in pairwise(runs):  # elements in a row that point into one collection
            at = missing[lo:hi]
            heap = h5.heap_collection(int(addresses[at[0]]), (indices[at], counts[at]))
            listed = indices[at].tolist()
            codes = list(map(heap.objects.get, listed))
            if None in codes:
                heap.get(listed[codes.index(None)])  # raises the usual error
            looked_up += cast("list[int]", codes)
        if max(looked_up) >= 1 << 63:  # a key of 32 KiB or more: its code is no int64
            every = found.tolist()
            for j, code in zip(missing.tolist(), looked_up):
                every[j] = code
            return _each_text(h5.buffer, every)
        found[missing] = looked_up
    return _texts(h5.buffer, found.view(np.uint64))


def _checked_fields(buf: Any, offsets: Offsets) -> tuple[Any, Any, Any]:
    """:func:`_fields` of the elements at ``offsets`` of ``buf``; Nones when one lies out of range."""
    raw = np.frombuffer(buf, np.uint8)
    if type(offsets) is range and offsets.step > 0:  # (the bounds without a pass over them)
        low, high = offsets.start, offsets[-1] if offsets else -1
    else:
        offsets = np.asarray(offsets)
        low, high = (int(offsets.min()), int(offsets.max())) if len(offsets) else (0, -1)
    if high < 0 or low < 0 or high + 16 > len(raw):
        return None, None, None
    return _fields(buf, raw, offsets)


def _fields(buf: Any, raw: np.ndarray, offsets: Offsets) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The count (a String's bytes), collection address and object index of each vlen element
    at ``offsets`` (in range). Elements evenly spaced (one per Pair, the usual case: given as a
    ``range``, or found so) are read through strided views of ``buf``, with no copy; others are
    gathered first."""
    n = len(offsets)
    first = int(offsets[0])
    step = int(offsets[1] - offsets[0]) if n > 1 else 16
    if step >= 16 and (n < 3 or type(offsets) is range or bool((np.diff(offsets) == step).all())):
        view = raw[first:]  # (a uint8 view: works for bytes, bytearray and memoryview alike)
        return (
            np.ndarray((n,), "<u4", view, 0, (step,)),
            np.ndarray((n,), "<u8", view, 4, (step,)),
            np.ndarray((n,), "<u4", view, 12, (step,)),
        )
    elements = raw[np.asarray(offsets)[:, None] + np.arange(16)]
    counts = elements[:, :4].copy().view("<u4").ravel()
    addresses = elements[:, 4:12].copy().view("<u8").ravel()
    indices = elements[:, 12:].copy().view("<u4").ravel()
    return counts, addresses, indices


def _each_text(buffer: memoryview, codes: list[int]) -> list[str]:
    """The texts of the heap objects ``codes``, each decoded from its own bytes."""
    return [decode_text(buffer[c & OFFSET_MASK : (c & OFFSET_MASK) + (c >> SIZE_SHIFT)]) for c in codes]


def _texts(buffer: memoryview, codes: np.ndarray) -> list[str] | None:
    """The texts of the heap objects ``codes`` (see :data:`SIZE_SHIFT`): their bytes gathered
    into one buffer, a NUL after each, decoded at once and split at the NULs (a UTF-8 sequence
    never spans an ASCII byte, so each piece is what decoding its own bytes gives). Objects
    holding a NUL are cut from the text one by one instead; None when the texts would hold more
    bytes than the file (objects shared by many keys: the one-by-one path stops at the first
    key seen twice)."""
    at = (codes & OFFSET_MASK).astype(np.int64)
    sizes = (codes >> SIZE_SHIFT).astype(np.int64)
    slots = sizes + 1  # each text's bytes and the NUL after it, among the gathered bytes
    ends = np.cumsum(slots)
    total = int(ends[-1]) - len(sizes)
    if total > len(buffer):
        return None
    if total > _GATHERED_MAX:  # long texts: no index arrays of 8 bytes per byte of them
        return _each_text(buffer, codes.tolist())
    if not total:
        return [""] * len(sizes)
    raw = np.frombuffer(buffer, np.uint8)
    before = ends - slots  # where each text begins among the gathered bytes
    # each text's NUL slot reads the byte after the text (the file's last, at its end) and is
    # then made a NUL: one gather and one store of n, not a scatter of every byte
    gathered = raw.take(np.repeat(at - before, slots) + np.arange(int(ends[-1])), mode="clip")
    gathered[ends - 1] = 0
    if np.count_nonzero(gathered) == total:  # no text holds a NUL
        return gathered[:-1].tobytes().decode("utf-8", "surrogateescape").split("\0")
    text = gathered.tobytes().decode("latin-1")  # one character per byte
    cut = list(map(text.__getitem__, map(slice, before.tolist(), (ends - 1).tolist())))
    return [key if key.isascii() else decode_text(key.encode("latin-1")) for key in cut]
