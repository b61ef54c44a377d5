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
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import PathSegment
from .._values import NamedTuple as JlNamedTuple
from . import _encode_hdf5 as enc
from ._writer_dicts import DictForm, dict_form_of, write_dict_run
from ._writer_rows import hand_over, open_region, place_arrays, place_heap, put_compact
from ._writer_runs import (
    BASE,
    HEAP_FULL,
    HEAP_MIN,
    Form,
    PairValue,
    PairVector,
    Run,
    form_of,
    plan_run,
    utf8,
)
from ._writer_types import JT

if TYPE_CHECKING:
    from ._writer import JLD2Writer

BULK_MIN = 32
"""Elements from which a vector of references is written in bulk."""

_RUN_BYTES = 2 << 20
"""Bytes laid out at once (a run is split so that its buffer stays well inside the sink's window)."""


enabled = True
"""Switched off by tests, which then compare the bytes with the one-by-one path."""


def worth_bulk(items: Sequence[Any]) -> bool:
    """Whether :func:`encode_refs` pays for a vector of references: :data:`BULK_MIN` elements or
    more, or a Dict's Pairs whose values are Dicts (each holding a run of its own)."""
    n = len(items)
    return n >= BULK_MIN or (n > 1 and type(items) is PairVector and isinstance(items.seconds[-1], dict))


def encode_refs(
    writer: JLD2Writer, e: JT, items: Sequence[Any], ws: dict[Hashable, int], path: tuple[PathSegment, ...]
) -> bytes:
    """The references of ``items`` (a vector of element type ``e`` stored as references), each
    item written as ``writer.encode_field(e, item, False, ws, path + (i,))`` writes it."""
    out: list[bytes] = []
    n, i = len(items), 0
    form: Form | DictForm | None = None
    while i < n:
        for _ in range(2):  # the run's form, else the form of this item (a new run)
            if form is None:
                form = (
                    (form_of(writer, e, items[i]) or dict_form_of(writer, e, items, i, _RUN_BYTES))
                    if enabled
                    else None
                )
                if form is None:
                    break
            if type(form) is DictForm:
                refs, j = write_dict_run(writer, form, items, i, ws, _RUN_BYTES)
            else:
                refs, j = _write_run(writer, form, items, i, ws)  # type: ignore[arg-type]
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


def _write_run(
    writer: JLD2Writer, form: Form, items: Sequence[Any], first: int, ws: dict[Hashable, int]
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
            filled = gh.count >= HEAP_FULL
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
                size = max(objsz, HEAP_MIN)
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


def _run_length(form: Form) -> int:
    """Elements laid out at once: about :data:`_RUN_BYTES` of headers and data (and keys)."""
    size = form.plan[2]
    for spec in form.arrays:
        size += 24 if spec is None else spec[2][1] + 7 + spec[2][2]
    return max(1, _RUN_BYTES // size)


def _lay_out(writer: JLD2Writer, form: Form, start: int, end: int, run: Run) -> None:
    """Assemble the bytes of a run laid out by :func:`_write_run` and put them in the sink: the
    span ``[start, end)`` filled in place in the sink's window, pieces before it (heap objects
    of a collection made earlier, its free-space marker) one by one."""
    region, found = open_region(writer, start, end)
    sums: list[tuple[np.ndarray, int]] = []  # headers: their positions in the region, their length
    outside = place_heap(region, start, run)
    # The compact headers: the template, then each field's bytes.
    columns: list[Any] = []
    for f, kind in enumerate(form.fields):
        columns.append((run.counts[f], run.heaps[f], run.indices[f]) if kind == "vlen" else run.array_at[f])
    put_compact(region, np.asarray(run.headers, np.int64) - start, form.plan, columns, sums)
    for f, spec in enumerate(form.arrays):
        if spec is not None:
            place_arrays(region, start, spec, run.array_at[f], run.data_at[f], run.arrays[f], sums)
    hand_over(writer, region, found, start, sums, outside)
