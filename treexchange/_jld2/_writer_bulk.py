"""Many alike references written at once: a Dict's Pairs, a model's layers.

A Dict of 100,000 arrays is a vector of references to Pairs, each a scalar dataset stored in its
header (its key in the global heap, its value a reference to a small array dataset); a Flux-like
state is a vector of references to layers (NamedTuples of references to arrays). Written one at a
time (:meth:`JLD2Writer.encode_field` → ``write_ref`` → ``_write_compact`` → ``store_vlen`` /
``_write_small_array``), each element costs some thirty Python calls. Once the first element of a
kind has been written that way, the writer holds per-file plans for it (the template of the
compact header, the head of the array header), and every later element of the same kind lays out
the same bytes at offsets that follow from the sizes alone.

:func:`encode_refs` writes such runs in bulk: one pass in Python works out every offset exactly as
the one-by-one path allocates them (compact header reserved, then each field in order: a key's
heap object -- into the current global heap collection, or a new one -- or an array's header and
its 8-aligned data), then the bytes of the whole run are assembled with numpy into one buffer,
put in the sink at once with the positions of its object headers (checksummed at the flush, as
every header is). The file is byte for byte what the one-by-one path writes:
``tests/test_write_plans.py`` writes the same values with this path switched off and compares.
Anything else (a value already written, an array of a shape not planned yet, a key that is not a
``str``, a field of another kind) is written one by one, in its place.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import PathSegment
from .._values import NamedTuple as JlNamedTuple
from . import _encode_hdf5 as enc
from ._writer_arrays import column_major_bytes, little_endian
from ._writer_runs import PairValue, Run, plan_run, utf8
from ._writer_types import JT, Cat

if TYPE_CHECKING:
    from ._writer import JLD2Writer

LAYOUT_CONTIGUOUS = struct.Struct("<BHBBBQQ")  # enc.layout_contiguous as one struct: message head, body


BULK_MIN = 32
"""Elements from which a vector of references is written in bulk."""

_RUN_BYTES = 2 << 20
"""Bytes laid out at once (a run is split so that its buffer stays well inside the sink's window)."""

BASE = enc.FILE_HEADER_LENGTH  # (what _writer calls BASE: relative addresses start here)
_HEAP_FULL = 0xFFFF  # objects in one global heap collection (JLD2's limit)
_HEAP_MIN = 4096  # size of a new collection (without its 16-byte header), as write_heap_object makes
_ADDRESS_AT = 6  # where the data address sits in the contiguous layout message (after its head)
_VLEN = np.dtype([("count", "<u4"), ("heap", "<u8"), ("index", "<u4")])
_HEAP_OBJECT = np.dtype([("index", "<u2"), ("refs", "<u2"), ("reserved", "<u4"), ("size", "<u8")])

enabled = True
"""Switched off by tests, which then compare the bytes with the one-by-one path."""


class _Form:
    """What every element of a run shares: its type, compact-header plan, and per field its
    kind -- ``"vlen"`` (a String) or ``"ref"`` (a numpy array of one dtype and shape, whose
    small-array plan the writer holds)."""

    __slots__ = ("arrays", "fields", "jt", "names", "pair", "plan")

    def __init__(self, jt: JT, plan: tuple[JT, bytes, int, int, bytes], fields: list[str], pair: bool):
        self.jt = jt
        self.plan = plan
        self.fields = fields
        self.names = [name for name, _ in jt.writeas.fields]
        self.pair = pair
        # per ref field: (dtype, shape, (array header head, header size, data size))
        self.arrays: list[tuple[np.dtype, tuple[int, ...], tuple[bytes, int, int]] | None] = []


def encode_refs(
    writer: JLD2Writer, e: JT, items: Sequence[Any], ws: dict[Hashable, int], path: tuple[PathSegment, ...]
) -> bytes:
    """The references of ``items`` (a vector of element type ``e`` stored as references), each
    item written as ``writer.encode_field(e, item, False, ws, path + (i,))`` writes it."""
    out: list[bytes] = []
    n, i = len(items), 0
    form: _Form | None = None
    while i < n:
        for _ in range(2):  # the run's form, else the form of this item (a new run)
            if form is None:
                form = _form_of(writer, e, items[i]) if enabled else None
                if form is None:
                    break
            refs, j = _write_run(writer, form, items, i, ws)
            if j > i:
                out.append(refs)
                i = j
                break
            form = None
        else:
            form = None
        if i < n and form is None:  # one by one (its plans are then made for the next ones)
            out.append(writer.encode_field(e, items[i], False, ws, (*path, i + 1)))
            i += 1
    return b"".join(out)


def _form_of(writer: JLD2Writer, e: JT, item: Any) -> _Form | None:
    """The form of ``item`` when it can be written in bulk (see the module docstring)."""
    ew = e.writeas
    if writer.field_kind(ew, False) != "ref" or (ew is not e and ew.cat is Cat.ARRAY):
        return None
    pair = type(item) is PairValue
    if pair:
        jt = item.jt
        values = [item.first, item.second]
    elif type(item) is JlNamedTuple:
        jt = writer.types.of_value(item)
        values = list(item._data.values())
    else:
        return None
    plan = writer._compact_plans.get(id(jt))
    w = jt.writeas
    if plan is None or plan[0] is not jt or jt.mutable or w.cat is not Cat.STRUCT:
        return None
    if len(values) != len(w.fields):
        return None
    if not pair and (w.name != "Core.NamedTuple" or list(item._data) != [n for n, _ in w.fields]):
        return None
    kinds: list[str] = []
    arrays: list[tuple[np.dtype, tuple[int, ...], tuple[bytes, int, int]] | None] = []
    for (_, ft), v in zip(w.fields, values):
        if ft.writeas is not ft:
            return None
        kind = writer.field_kind(ft, True)
        if kind == "vlen" and ft.cat is Cat.STRING and type(v) is str:
            kinds.append("vlen")
            arrays.append(None)
        elif kind == "ref" and type(v) is np.ndarray and (v.dtype, v.shape) in writer._ref_plans:
            kinds.append("ref")
            arrays.append((v.dtype, v.shape, writer._ref_plans[(v.dtype, v.shape)]))
        else:
            return None
    form = _Form(jt, plan, kinds, pair)
    form.arrays = arrays
    return form


def _write_run(
    writer: JLD2Writer, form: _Form, items: Sequence[Any], first: int, ws: dict[Hashable, int]
) -> tuple[bytes, int]:
    """Write ``items[first:j]`` in bulk, for the longest ``j`` (within :data:`_RUN_BYTES`) whose
    items have ``form`` and are written by the plans alone (no array among them written before:
    in ``ws``, or twice in the run); their references (8 bytes each) and ``j``.

    The offsets are worked out with numpy (:func:`._writer_runs.plan_run`), or for a form it does
    not plan here in one pass, as the one-by-one path allocates them; the bytes are then
    assembled by :func:`_lay_out`."""
    planned = plan_run(writer, form, items, first, _run_length(form), ws)
    if planned is not None:
        run, k, start, end = planned
        if k == 0:
            return b"", first
        _lay_out(writer, form, start, end, run)
        return (run.headers - BASE).astype("<u8").tobytes(), first + k
    csize = form.plan[2]
    start = end = writer.end
    limit = start + _RUN_BYTES
    run = Run(len(form.fields))
    headers = run.headers
    gh = writer.heap
    fields = [(f, form.arrays[f]) for f in range(len(form.fields))]
    pair, jt, names = form.pair, form.jt, form.names
    seen: set[int] = set()
    n = len(items)
    j = first
    while j < n and end < limit:
        item = items[j]
        if pair:
            if type(item) is not PairValue or item.jt is not jt:
                break
            values: tuple[Any, ...] = (item.first, item.second)
        else:
            if type(item) is not JlNamedTuple or list(item._data) != names:
                break
            values = tuple(item._data.values())
        fits = True
        for f, spec in fields:  # the checks first: nothing is allocated for a misfit
            v = values[f]
            if spec is None:
                fits = type(v) is str
            else:
                fits = type(v) is np.ndarray and v.dtype == spec[0] and v.shape == spec[1]
                if fits:
                    key = id(v)
                    fits = key not in seen and ("id", key) not in ws
                    seen.add(key)
            if not fits:
                break
        if not fits:
            break
        j += 1
        headers.append(end)
        end += csize
        for f, spec in fields:
            v = values[f]
            if spec is not None:
                _, hsize, datasz = spec[2]
                header_end = end + hsize
                data_at = header_end + -header_end % 8
                run.array_at[f].append(end)
                run.data_at[f].append(data_at)
                run.arrays[f].append(v)
                ws[("id", id(v))] = end - BASE
                end = data_at + datasz
                continue
            raw = v.encode("utf-8") if v.isascii() else utf8(v, ())
            # write_heap_object, step by step (its offsets; the bytes are put by _lay_out)
            psz = len(raw)
            objsz = 16 + psz
            objsz += -objsz % 8
            filled = gh.count >= _HEAP_FULL
            if objsz + 16 < gh.free and not filled:
                pass
            elif gh.offset != 0 and end == gh.offset + 16 + gh.length and not filled:
                delta = objsz - gh.free + 16
                gh.free += delta
                gh.length += delta
                run.heap_puts.append((gh.offset + 8, struct.pack("<Q", gh.length)))
                end += delta
            else:
                marker, writer._heap_marker = writer._heap_marker, None
                if marker is not None:
                    run.heap_puts.append(marker)
                size = max(objsz, _HEAP_MIN)
                offset = end + -end % 8
                run.heap_puts.append((offset, enc.global_heap_header(size)))
                end = offset + 16 + size
                gh.offset, gh.length, gh.free, gh.count = offset, size, size, 0
            gh.count += 1
            objoffset = gh.offset + 16 + gh.length - gh.free
            gh.free -= objsz
            writer._heap_marker = (
                (objoffset + objsz, struct.pack("<QQ", 0, gh.free - 16)) if gh.free >= 16 else None
            )
            run.object_at.append(objoffset)
            run.object_index.append(gh.count)
            run.object_raw.append(raw)
            run.object_len.append(psz)
            run.counts[f].append(psz)
            run.heaps[f].append(gh.offset - BASE)
            run.indices[f].append(gh.count)
    if j == first:
        return b"", first
    for f, _ in fields:
        writer._keepalive.extend(run.arrays[f])
    writer.end = end
    _lay_out(writer, form, start, end, run)
    return (np.asarray(headers, np.int64) - BASE).astype("<u8").tobytes(), j


def _run_length(form: _Form) -> int:
    """Elements laid out at once: about :data:`_RUN_BYTES` of headers and data (and keys)."""
    size = form.plan[2]
    for spec in form.arrays:
        size += 24 if spec is None else spec[2][1] + 7 + spec[2][2]
    return max(1, _RUN_BYTES // size)


def _lay_out(writer: JLD2Writer, form: _Form, start: int, end: int, run: Run) -> None:
    """Assemble the bytes of a run laid out by :func:`_write_run` and put them in the sink: the
    span ``[start, end)`` filled in place in the sink's window, pieces before it (heap objects
    of a collection made earlier, its free-space marker) one by one."""
    _, chead, _, cdatasz, ctail = form.plan
    sink = writer.sink
    found = sink.region(start, end - start)  # filled in place: no copy of the data in between
    region = np.zeros(end - start, np.uint8) if found is None else found
    sums: list[tuple[np.ndarray, int]] = []  # headers: their positions in the region, their length
    outside: list[tuple[int, bytes]] = []
    # Heap metadata (collection headers, markers, sizes) and the objects never overlap.
    for offset, data in run.heap_puts:
        if offset >= start and offset + len(data) <= end:
            region[offset - start : offset - start + len(data)] = np.frombuffer(data, np.uint8)
        else:
            outside.append((offset, data))
    if len(run.object_at):
        _place_heap_objects(region, start, run, outside)
    # The compact headers: the template, then each field's bytes.
    at = np.asarray(run.headers, np.int64) - start
    template = np.frombuffer(chead + bytes(cdatasz) + ctail, np.uint8)
    rows = _rows(template, len(at))
    col = len(chead)
    for f, kind in enumerate(form.fields):
        if kind == "vlen":
            packed = np.zeros(len(at), _VLEN)
            packed["count"], packed["heap"], packed["index"] = run.counts[f], run.heaps[f], run.indices[f]
            rows[:, col : col + 16] = packed.view(np.uint8).reshape(-1, 16)
            col += 16
        else:
            addresses = np.asarray(run.array_at[f], np.int64) - BASE
            rows[:, col : col + 8] = addresses.astype("<u8").view(np.uint8).reshape(-1, 8)
            col += 8
    _put_rows(region, at, rows)
    sums.append((at, rows.shape[1]))
    for f, spec in enumerate(form.arrays):
        if spec is not None:
            _place_arrays(region, start, spec, run.array_at[f], run.data_at[f], run.arrays[f], sums)
    if found is not None:
        sink.region_done(start, end - start, sums)
    else:
        raw = region.tobytes()  # piece by piece: the data, then the headers with their checksums
        sink.put(start, raw)
        for positions, length in sums:
            for pos in positions.tolist():
                sink.put_checksummed(start + pos, raw[pos : pos + length])
    for offset, data in outside:
        sink.put(offset, data)


def _rows(template: np.ndarray, k: int) -> np.ndarray:
    """``k`` copies of ``template``, one a row."""
    rows = np.empty((k, len(template)), np.uint8)
    rows[...] = template
    return rows


def _put_rows(region: np.ndarray, at: np.ndarray, rows: np.ndarray) -> None:
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
    _put_rows(buf, offs, heads.view(np.uint8).reshape(-1, 16))
    text = np.frombuffer(b"".join(raws), np.uint8)
    if len(text):
        # byte k of key j goes to offs[j] + 16 + k
        firsts = np.cumsum(lens) - lens
        buf[np.repeat(offs + 16 - firsts, lens) + np.arange(len(text))] = text


def _place_arrays(
    region: np.ndarray,
    start: int,
    spec: tuple[np.dtype, tuple[int, ...], tuple[bytes, int, int]],
    array_at: list[int],
    data_at: list[int],
    arrays: Sequence[np.ndarray],
    sums: list[tuple[np.ndarray, int]],
) -> None:
    """Small array datasets of one dtype and shape (``spec``: theirs and their plan) into the
    region: headers -- the plan's head, the contiguous layout message, the continuation
    placeholder -- in bulk, then each array's data 8-aligned after its header."""
    dtype, shape, (head, _, datasz) = spec
    header_at = np.asarray(array_at, np.int64) - start
    data = np.asarray(data_at, np.int64)
    layout = LAYOUT_CONTIGUOUS.pack(enc.MSG_LAYOUT, 18, 0, 4, 1, 0, datasz)
    template = np.frombuffer(head + layout + enc.CONTINUATION_PLACEHOLDER, np.uint8)
    rows = _rows(template, len(arrays))
    col = len(head) + _ADDRESS_AT
    rows[:, col : col + 8] = (data - BASE).astype("<u8").view(np.uint8).reshape(-1, 8)
    _put_rows(region, header_at, rows)
    sums.append((header_at, rows.shape[1]))
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
