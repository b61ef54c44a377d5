"""Many global heap collections parsed at once, from the objects a reader is about to look up.

A Dict of 100,000 String keys spreads them over ~600 collections of ~170 objects each (JLD2
fills a collection of 4 KiB, then starts the next); parsing each collection object by object is
a Python step per object. A reader that knows which objects it wants (the keys' vlen elements:
collection, object index, byte count) usually asks for all objects ``1..K`` of a collection, but
for a few (the keys of an outer Dict between its inner Dicts' keys, a String field): where each
object lies then follows from the sizes before it. :func:`predict_collections` computes that
for every collection together, reading the size of each object it was not asked for (a few per
collection, all collections in one numpy pass per such object), and compares every header with
what it predicts in one numpy pass. A collection whose headers all agree holds exactly what the
object-by-object scan of :class:`GlobalHeapCollection` finds (the objects after the predicted
ones are scanned as usual), and is registered as parsed; any other is left to that scan, which
reports whatever is wrong in its own words.

The usual case, every object of each collection wanted once (a Dict of Dicts' keys with the
outer Dict's among them: see ``Reader.prime(keys=...)``), is predicted by :func:`_predict_whole`
in a third of the numpy passes; a collection it predicts whole is registered with its objects'
codes, the dict of them made only if it is looked at again.
"""

from __future__ import annotations

import numpy as np

from .._errors import FormatError
from ._file import HDF5File, gather_le
from ._globalheap import SIZE_SHIFT, GlobalHeapCollection

_UNASKED_MAX = 8
"""Objects not asked for, per collection, up to which the prediction reads their sizes (one
numpy pass over all collections per object): an outer Dict's keys between its inner Dicts'."""
_HEAD = 16  # object header: index (u16), reference count (u16), reserved (4), size (u64)


def _headers(raw: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The index (as int64) and size fields of the object headers at offsets ``at`` of ``raw``
    (each whole in ``raw``)."""
    return gather_le(raw, at, 2).astype(np.int64), gather_le(raw, at + 8, 8)


def predict_collections(
    h5: HDF5File, addresses: np.ndarray, indices: np.ndarray, sizes: np.ndarray
) -> np.ndarray:
    """Register in ``h5`` (as :meth:`HDF5File.heap_collection` would parse them) the collections
    at relative ``addresses`` not parsed yet whose layout the wanted objects predict: object
    ``indices[i]`` of ``sizes[i]`` bytes in the collection at ``addresses[i]``. Nothing is
    raised: a collection that does not fit the prediction is left for the usual parse.

    Returns where each wanted object lies, as ``objects`` of the collection holds it (see
    :data:`SIZE_SHIFT`), for those in the collections registered here; 0 for the others.
    """
    heaps = h5._heaps
    found = np.zeros(len(addresses), np.int64)
    if h5.length_size != 8 or not len(addresses) or len(h5.buffer) < _HEAD:
        return found
    whole = _predict_whole(h5, addresses, indices, sizes)
    if whole is not None:
        return whole
    addr, idx, size = addresses.astype(np.uint64), indices.astype(np.int64), sizes.astype(np.int64)
    later = (addr[1:] > addr[:-1]) | ((addr[1:] == addr[:-1]) & (idx[1:] >= idx[:-1]))
    order = np.arange(len(addr)) if bool(later.all()) else np.lexsort((idx, addr))  # (usually sorted)
    addr, idx, size = addr[order], idx[order], size[order]
    # one row per distinct (collection, index); a twice-wanted object must be wanted alike
    new = np.ones(len(addr), bool)
    new[1:] = (addr[1:] != addr[:-1]) | (idx[1:] != idx[:-1])
    first = np.ones(len(addr), bool)
    first[1:] = addr[1:] != addr[:-1]
    colls = addr[first]
    col_of = np.cumsum(first) - 1
    bad = np.array([a in heaps for a in colls.tolist()])  # parsed already: nothing to predict
    if bad.all():
        return found
    bad[col_of[~new & (np.concatenate(([0], size[:-1])) != size)]] = True
    each_col, each_idx = col_of, idx  # (every wanted object, twice-wanted ones too)
    idx, size, col_of = idx[new], size[new], col_of[new]
    wanted = np.bincount(col_of, minlength=len(colls))
    ends_at = np.cumsum(wanted)
    last, low = idx[ends_at - 1], idx[ends_at - wanted]  # rows sorted: K, the highest index wanted
    bad |= (low < 1) | (last - wanted > _UNASKED_MAX) | (last > 0xFFFF)
    too_long = size >= 1 << (63 - SIZE_SHIFT)  # (keys of 32 KiB and more: no room in a code)
    if too_long.any():
        bad[col_of[too_long]] = True
    # the collections' headers: "GCOL", version 1, size (the end, as GlobalHeapCollection reads it)
    raw = np.frombuffer(h5.buffer, np.uint8)
    total = len(raw)
    starts = colls.astype(np.int64) + h5.base
    fits = (colls < np.uint64(max(total - h5.base - _HEAD, 0))) & (starts + _HEAD <= total)
    bad |= ~fits
    starts = np.where(fits, starts, 0)
    heads = raw[starts[:, None] + np.arange(5)]
    bad |= ~(heads == np.frombuffer(b"GCOL\x01", np.uint8)).all(axis=1)
    declared = gather_le(raw, starts + 8, 8)
    ends = np.where(
        declared <= np.uint64(total), np.minimum(starts + _HEAD + declared.astype(np.int64), total), total
    )
    if bad.all():
        return found
    # every object 1..K of each good collection: its size where wanted, -1 where not
    good = np.flatnonzero(~bad)
    count = last[good]
    row0 = np.concatenate(([0], np.cumsum(count)[:-1]))
    where = np.full(len(colls), -1, np.int64)
    where[good] = row0
    n_rows = int(count.sum())
    coll = np.repeat(good, count)
    expected = np.arange(n_rows) - np.repeat(row0, count) + 1
    row_size = np.full(n_rows, -1, np.int64)
    asked = ~bad[col_of]
    row_size[where[col_of[asked]] + idx[asked] - 1] = size[asked]
    for _ in range(_UNASKED_MAX):
        unknown = np.flatnonzero(row_size < 0)
        if not len(unknown):
            break
        # the first unknown object of each collection: where it lies follows from those before it
        first_unknown = unknown[np.unique(coll[unknown], return_index=True)[1]]
        at = _heads(row_size, coll, where, starts, first_unknown)
        c = coll[first_unknown]
        ok = at + _HEAD <= ends[c]
        at = np.where(ok, at, starts[c])
        found_index, found_size = _headers(raw, at)
        ok &= (found_index == expected[first_unknown]) & (found_size < np.uint64(1 << (63 - SIZE_SHIFT)))
        n = found_size.astype(np.int64)
        ok &= n <= ends[c] - at - _HEAD
        bad[c[~ok]] = True
        row_size[first_unknown] = np.where(ok, n, 0)
    else:
        bad[coll[row_size < 0]] = True
    row_size[row_size < 0] = 0  # (collections marked bad above)
    # every header compared with what is predicted, all collections at once
    at = _heads(row_size, coll, where, starts, np.arange(n_rows))
    ends_of = ends[coll]
    fit = at + _HEAD <= ends_of
    at = np.where(fit, at, starts[coll])
    found_index, found_size = _headers(raw, at)
    ok = fit & (found_index == expected) & (found_size == row_size.astype(np.uint64))
    ok &= row_size <= ends_of - at - _HEAD
    bad[coll[~ok]] = True
    codes = (row_size << SIZE_SHIFT) | (at + _HEAD)
    # where the scan goes on after each collection's predicted objects: a tail to scan unless
    # the collection ends there (no room for a header, or the free-space object, index 0)
    row_end = row0 + count - 1
    after = np.minimum(ends[good], at[row_end] + _HEAD + row_size[row_end] + (-row_size[row_end] % 8))
    room = ends[good] - after >= _HEAD
    tail = room.copy()
    tail[room] = gather_le(raw, after[room], 2) != 0
    codes_list, expected_list = codes.tolist(), expected.tolist()
    row0_list, count_list, ends_list = row0.tolist(), count.tolist(), ends.tolist()
    starts_list, after_list, tail_list = starts.tolist(), after.tolist(), tail.tolist()
    for k, c in enumerate(good.tolist()):
        if bad[c]:
            continue
        lo, hi = row0_list[k], row0_list[k] + count_list[k]
        objects = dict(zip(expected_list[lo:hi], codes_list[lo:hi]))
        if not _register(
            h5, int(colls[c]), starts_list[c], objects, after_list[k] if tail_list[k] else None, ends_list[c]
        ):
            bad[c] = True
    hit = ~bad[each_col]
    found[order[hit]] = codes[where[each_col[hit]] + each_idx[hit] - 1]
    return found


def _heads(
    row_size: np.ndarray, coll: np.ndarray, where: np.ndarray, starts: np.ndarray, rows: np.ndarray
) -> np.ndarray:
    """Where the headers of ``rows`` lie: after the collection's header and every object before
    them in their collection (each a header, its body and padding to 8 bytes; sizes known)."""
    known = np.maximum(row_size, 0)
    steps = _HEAD + known + (-known % 8)
    before = np.cumsum(steps) - steps  # exclusive: over all rows of all collections
    c = coll[rows]
    return starts[c] + _HEAD + before[rows] - before[where[c]]


def _register(
    h5: HDF5File, address: int, start: int, objects: dict[int, int], tail: int | None, end: int
) -> bool:
    """Register the collection at relative ``address`` (absolute ``start``, ending at ``end``)
    whose first objects are the predicted ``objects``, with those after them (from ``tail``, when
    the collection does not end there) as the scan finds them. False when the predicted codes
    are not the collection's: the scan of the tail fails (nothing registered: the usual parse
    raises it, where the object is wanted) or a later object reuses a predicted index (and wins:
    look it up in ``objects``)."""
    usable = True
    if tail is not None:
        rest = GlobalHeapCollection.known(start, {})
        try:
            rest._scan(h5.buffer, tail, end)
        except FormatError:
            return False
        usable = rest.objects.keys().isdisjoint(objects)
        objects.update(rest.objects)
    h5._heaps[address] = GlobalHeapCollection.known(start, objects)
    return usable


def _predict_whole(
    h5: HDF5File, addresses: np.ndarray, indices: np.ndarray, sizes: np.ndarray
) -> np.ndarray | None:
    """:func:`predict_collections` in the usual case, in a third of its numpy passes: each
    collection not parsed yet is wanted whole, every object ``1..K`` of it once (a Dict's keys,
    with the keys of the Dict around them), so no object's size is to be looked for and no row
    is wanted twice. None in any other case: the general prediction then runs.

    The same checks, in the same words: each collection's header ("GCOL", version 1, the size
    giving its end), each predicted object header (its index and size, whole in the collection),
    the objects after the predicted ones scanned (:func:`_register`)."""
    buf, base = h5.buffer, h5.base
    total, n = len(buf), len(addresses)
    if (
        int(indices.max()) > 0xFFFF
        or int(sizes.max()) >= 1 << (63 - SIZE_SHIFT)
        or int(addresses.max()) >= total
    ):
        return None
    key = addresses.astype(np.int64) << 16  # (collection, index) in one sortable int
    key |= indices
    size = sizes.astype(np.int64)
    order = None
    if not bool((key[1:] > key[:-1]).all()):
        order = np.argsort(key, kind="stable")
        key, size = key[order], size[order]
        if not bool((key[1:] > key[:-1]).all()):
            return None  # an object wanted twice
    cut = np.flatnonzero((key[1:] >> 16) != (key[:-1] >> 16)) + 1
    lo, hi = np.concatenate(([0], cut)), np.concatenate((cut, [n]))
    steps = size + ((-size) & 7) + _HEAD  # header, body, padding to 8 bytes
    ends_after = np.cumsum(steps)  # each object's end past the first collection's objects
    first, last, before = key[lo].tolist(), key[hi - 1].tolist(), (ends_after - steps)[lo].tolist()
    lo_list, hi_list, count = lo.tolist(), hi.tolist(), (hi - lo).tolist()
    bases, ends = [0] * len(lo_list), [0] * len(lo_list)  # (0: no prediction, the usual path)
    starts, live = [0] * len(lo_list), []
    raw = np.frombuffer(buf, np.uint8)
    for c, (lo_key, hi_key) in enumerate(zip(first, last)):
        address = lo_key >> 16
        if address in h5._heaps:
            continue  # parsed already: nothing to predict
        if lo_key & 0xFFFF != 1 or hi_key & 0xFFFF != count[c]:
            return None  # not wanted whole
        start = address + base
        if address >= total - base - _HEAD or start + _HEAD > total:
            continue
        if bytes(buf[start : start + 5]) != b"GCOL\x01":
            continue
        declared = int.from_bytes(buf[start + 8 : start + 16], "little")
        ends[c] = min(total, start + _HEAD + declared) if declared <= total else total
        bases[c], starts[c] = start + _HEAD - before[c], start
        live.append(c)
    if not live:
        return np.zeros(n, np.int64)
    at = np.repeat(bases, count) + (ends_after - steps)
    fit = at + _HEAD + size <= np.repeat(ends, count)
    at = np.where(fit, at, 0)
    ok = fit & (gather_le(raw, at, 2) == (key & 0xFFFF)) & (gather_le(raw, at + 8, 8).view(np.int64) == size)
    good = np.logical_and.reduceat(ok, lo).tolist()
    codes = (size << SIZE_SHIFT) | (at + _HEAD)
    last_end = ends_after[hi - 1].tolist()
    usable = [False] * len(lo_list)
    for c in live:
        if not good[c]:
            continue
        end, after = ends[c], min(ends[c], bases[c] + last_end[c])  # (past the last one's padding)
        mine = codes[lo_list[c] : hi_list[c]]
        # a tail to scan unless the collection ends there (no room for a header, or the
        # free-space object: index 0)
        if end - after >= _HEAD and buf[after] | buf[after + 1]:
            objects = dict(zip(range(1, count[c] + 1), mine.tolist()))
            usable[c] = _register(h5, starts[c] - base, starts[c], objects, after, end)
        else:  # exactly these objects: their dict made when (if ever) it is looked at
            h5._heaps[starts[c] - base] = GlobalHeapCollection.known_lazily(starts[c], mine)
            usable[c] = True
    found = np.where(np.repeat(usable, count), codes, 0)
    if order is None:
        return found
    out = np.empty(n, np.int64)
    out[order] = found
    return out
