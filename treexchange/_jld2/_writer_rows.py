"""The bytes of runs laid out at once (:mod:`._writer_bulk`, :mod:`._writer_dicts`): rows of alike
headers from a template, put into a region of the sink's window by strided copies.

A run's offsets are known before any byte is made (:mod:`._writer_runs`); these helpers fill the
span ``[start, end)`` it takes: heap collections and objects (keys), compact scalar headers (a
Pair, a Dict), contiguous dataset headers (a small array, a Dict's Pair vector) and the data
after them, then hand the span to the sink with the positions of its object headers, whose
checksums the sink computes together at its flush.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _encode_hdf5 as enc
from ._writer_arrays import column_major_bytes, little_endian
from ._writer_runs import BASE, Run
from ._writer_types import JT

if TYPE_CHECKING:
    from ._writer import JLD2Writer

LAYOUT_CONTIGUOUS = struct.Struct("<BHBBBQQ")  # enc.layout_contiguous as one struct: message head, body

_ADDRESS_AT = 6  # where the data address sits in the contiguous layout message (after its head)
_VLEN = np.dtype([("count", "<u4"), ("heap", "<u8"), ("index", "<u4")])
_HEAP_OBJECT = np.dtype([("index", "<u2"), ("refs", "<u2"), ("reserved", "<u4"), ("size", "<u8")])


def open_region(writer: JLD2Writer, start: int, end: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The bytes ``[start, end)`` to fill: the sink's window in place (no copy of the data in
    between), else a zeroed array (then put piece by piece by :func:`hand_over`); and the
    window's part, or None."""
    found = writer.sink.region(start, end - start)
    return (np.zeros(end - start, np.uint8) if found is None else found), found


def hand_over(
    writer: JLD2Writer,
    region: np.ndarray,
    found: np.ndarray | None,
    start: int,
    sums: list[tuple[np.ndarray, int]],
    outside: list[tuple[int, bytes]],
) -> None:
    """A region of :func:`open_region` is filled: to the sink with the positions of its object
    headers (``sums``: positions in the region and length, a kind of header each), and the
    pieces that lie outside it."""
    sink = writer.sink
    if found is not None:
        sink.region_done(start, len(region), sums)
    else:
        raw = region.tobytes()  # piece by piece: the data, then the headers with their checksums
        sink.put(start, raw)
        for positions, length in sums:
            for pos in positions.tolist():
                sink.put_checksummed(start + pos, raw[pos : pos + length])
    for offset, data in outside:
        sink.put(offset, data)


def place_heap(region: np.ndarray, start: int, run: Run) -> list[tuple[int, bytes]]:
    """A run's heap metadata (collection headers, markers, sizes) and heap objects into the
    region; returns the pieces that lie before it, to be put one by one."""
    outside: list[tuple[int, bytes]] = []
    end = start + len(region)
    # Heap metadata and the objects never overlap.
    for offset, data in run.heap_puts:
        if offset >= start and offset + len(data) <= end:
            region[offset - start : offset - start + len(data)] = np.frombuffer(data, np.uint8)
        else:
            outside.append((offset, data))
    if len(run.object_at):
        _place_heap_objects(region, start, run, outside)
    return outside


def put_compact(
    region: np.ndarray,
    at: np.ndarray,
    plan: tuple[JT, bytes, int, int, bytes],
    columns: Sequence[Any],
    sums: list[tuple[np.ndarray, int]],
) -> None:
    """Compact scalar headers of one plan (:meth:`JLD2Writer._plan_compact`) at positions ``at``
    of the region: the template, its value's bytes field by field -- per ``columns`` entry a
    String's vlen reference as ``(byte counts, collection addresses, indices)`` or a reference
    as the absolute offsets it points to."""
    _, chead, _, cdatasz, ctail = plan
    template = np.frombuffer(chead + bytes(cdatasz) + ctail, np.uint8)
    rows = _rows(template, len(at))
    col = len(chead)
    for column in columns:
        if type(column) is tuple:
            packed = np.zeros(len(at), _VLEN)
            packed["count"], packed["heap"], packed["index"] = column
            rows[:, col : col + 16] = packed.view(np.uint8).reshape(-1, 16)
            col += 16
        else:
            addresses = np.asarray(column, np.int64) - BASE
            rows[:, col : col + 8] = addresses.astype("<u8").view(np.uint8).reshape(-1, 8)
            col += 8
    put_rows(region, at, rows)
    sums.append((at, rows.shape[1]))


def _rows(template: np.ndarray, k: int) -> np.ndarray:
    """``k`` copies of ``template``, one a row."""
    rows = np.empty((k, len(template)), np.uint8)
    rows[...] = template
    return rows


def put_rows(region: np.ndarray, at: np.ndarray, rows: np.ndarray) -> None:
    """``region[at[i] : at[i] + width] = rows[i]`` for every row (``at`` ascending, rows apart):
    one strided copy per stretch of equally spaced rows (a run is one or a few stretches)."""
    k, width = rows.shape
    if k == 0:
        return
    if k == 1:
        lo = int(at[0])
        region[lo : lo + width] = rows[0]
        return
    steps = np.diff(at)
    cuts = np.flatnonzero(steps[1:] != steps[:-1]) + 1  # where the spacing changes
    edges = [0, *cuts.tolist(), k - 1]
    lows = at[edges].tolist()
    strides = steps[edges[:-1]].tolist()
    for i, (a, b) in enumerate(pairwise(edges)):  # rows a..b (b again in the next stretch: same bytes)
        stride = strides[i]
        if stride < width:  # (never: headers do not overlap) one row at a time
            for r in range(a, b + 1):
                lo = int(at[r])
                region[lo : lo + width] = rows[r]
            continue
        np.ndarray((b - a + 1, width), np.uint8, region, lows[i], (stride, 1))[...] = rows[a : b + 1]


def _place_heap_objects(region: np.ndarray, start: int, run: Run, outside: list[tuple[int, bytes]]) -> None:
    """Heap objects (16-byte head, the key, zeros to 8 bytes) into the region, in bulk; those in
    a collection made before the region (a Dict's keys added to the current one) as one piece
    when they follow each other (as they are allocated), else one by one."""
    # (offsets grow: the objects before the region first)
    first = int(np.searchsorted(np.asarray(run.object_at, np.int64), start))
    if first:
        _objects_before(run, first, outside)
    offs = np.asarray(run.object_at[first:], np.int64) - start
    if len(offs):
        _fill_heap_objects(
            region, offs, run.object_index[first:], run.object_raw[first:], run.object_len[first:]
        )


def _objects_before(run: Run, first: int, outside: list[tuple[int, bytes]]) -> None:
    """The heap objects ``[:first]`` of a run, which lie before its region, into ``outside``."""
    at = np.asarray(run.object_at[:first], np.int64)
    lens = np.asarray(run.object_len[:first], np.int64)
    sizes = (lens + 23) & ~7  # 16 + the key, padded to 8: each object's whole piece
    if first > 1 and bool((at[1:] == at[:-1] + sizes[:-1]).all()):  # one after the other
        piece = np.zeros(int(at[-1] + sizes[-1] - at[0]), np.uint8)
        _fill_heap_objects(piece, at - at[0], run.object_index[:first], run.object_raw[:first], lens)
        outside.append((int(at[0]), piece.tobytes()))
        return
    for pos, index, raw in zip(run.object_at[:first], run.object_index[:first], run.object_raw[:first]):
        outside.append((pos, enc.global_heap_object(index, len(raw)) + raw + bytes(-(16 + len(raw)) % 8)))


def _fill_heap_objects(
    buf: np.ndarray, offs: np.ndarray, indices: list[int], raws: list[bytes], lens: Any
) -> None:
    """Heap objects (head and key; ``buf`` holds zeros for the padding) at ``offs`` in ``buf``."""
    lens = np.asarray(lens, np.int64)
    heads = np.zeros(len(offs), _HEAP_OBJECT)
    heads["index"] = indices
    heads["refs"] = 1
    heads["size"] = lens
    put_rows(buf, offs, heads.view(np.uint8).reshape(-1, 16))
    text = np.frombuffer(b"".join(raws), np.uint8)
    if len(text):
        # byte k of key j goes to offs[j] + 16 + k
        firsts = np.cumsum(lens) - lens
        buf[np.repeat(offs + 16 - firsts, lens) + np.arange(len(text))] = text


def put_array_headers(
    region: np.ndarray,
    at: np.ndarray,
    head: bytes,
    datasz: int,
    data: np.ndarray,
    sums: list[tuple[np.ndarray, int]],
) -> None:
    """Headers of contiguous datasets of ``datasz`` bytes each at positions ``at`` of the region:
    ``head`` (:meth:`JLD2Writer._small_head`), the layout message with each one's data address
    (``data``, absolute offsets), the continuation placeholder."""
    layout = LAYOUT_CONTIGUOUS.pack(enc.MSG_LAYOUT, 18, 0, 4, 1, 0, datasz)
    template = np.frombuffer(head + layout + enc.CONTINUATION_PLACEHOLDER, np.uint8)
    rows = _rows(template, len(at))
    col = len(head) + _ADDRESS_AT
    rows[:, col : col + 8] = (data - BASE).astype("<u8").view(np.uint8).reshape(-1, 8)
    put_rows(region, at, rows)
    sums.append((at, rows.shape[1]))


def place_arrays(
    region: np.ndarray,
    start: int,
    spec: tuple[np.dtype, tuple[int, ...], tuple[bytes, int, int]],
    array_at: Sequence[int] | np.ndarray,
    data_at: Sequence[int] | np.ndarray,
    arrays: Sequence[np.ndarray],
    sums: list[tuple[np.ndarray, int]],
) -> None:
    """Small array datasets of one dtype and shape (``spec``: theirs and their plan) into the
    region: headers -- the plan's head, the contiguous layout message, the continuation
    placeholder -- in bulk, then each array's data 8-aligned after its header."""
    dtype, shape, (head, _, datasz) = spec
    data = np.asarray(data_at, np.int64)
    put_array_headers(region, np.asarray(array_at, np.int64) - start, head, datasz, data, sums)
    # The data: column-major, little-endian bytes (what _write_small_array writes), one copy
    # each into the region.
    lows = (data - start).tolist()
    if len(shape) <= 1 and dtype == little_endian(dtype):
        memory = region.data
        try:
            for v, lo in zip(arrays, lows):
                memory[lo : lo + datasz] = v.data.cast("B")
            return
        except (TypeError, ValueError):  # not contiguous, a dtype the buffer protocol lacks
            pass
    for v, lo in zip(arrays, lows):
        region[lo : lo + datasz] = np.frombuffer(column_major_bytes(v), np.uint8)
