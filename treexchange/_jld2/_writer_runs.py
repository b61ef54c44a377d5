"""The offsets of a run of alike references, worked out with numpy (see :mod:`._writer_bulk`).

A run is ``k`` elements of one form (a Pair of a String key and a small array, a layer of small
arrays ...). Each element is laid out as the one-by-one path allocates it: its compact header,
then each field in order -- a String's heap object (into the current global heap collection, or
a new collection made at the end of the file), an array's header and its 8-aligned data. Only the
heap decides anything per element, and it decides from the keys' sizes alone: which keys fit the
current collection, where a new one starts. So the layout is worked out in three steps, none of
them a Python loop over the elements:

1. the checks (types, dtypes, shapes, arrays not written before) over whole columns of values;
2. the heap: keys packed into collections, one ``searchsorted`` per collection;
3. the positions: between the elements that open a collection, every element is the one before
   shifted by the same stride (an arithmetic progression); an element that opens a collection,
   or one whose stride changes the 8-byte alignment, is walked through alone.

:func:`plan_run` returns None for a form whose heap may grow a collection in place (a String
right after another String: the collection just made is at the end of the file); the caller
then takes the step-by-step path.
"""

from __future__ import annotations

import struct
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import pairwise, repeat
from operator import attrgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import ConversionError, PathSegment
from .._values import NamedTuple as JlNamedTuple
from . import _encode_hdf5 as enc
from ._writer_types import JT, Cat

if TYPE_CHECKING:
    from ._writer import JLD2Writer

BASE = enc.FILE_HEADER_LENGTH
HEAP_FULL = 0xFFFF  # objects in one global heap collection (JLD2's limit)
HEAP_MIN = 4096  # size of a new collection (without its 16-byte header), as write_heap_object makes

DTYPE = attrgetter("dtype")
SHAPE = attrgetter("shape")
DATA = attrgetter("_data")


@dataclass(frozen=True)
class PairValue:
    """One ``Pair{K,V}`` of a Dict's ``kvvec``; its type is the Dict's, not its values' own."""

    first: Any
    second: Any
    jt: JT


def utf8(text: str, path: tuple[PathSegment, ...]) -> bytes:
    """``text`` in UTF-8; a lone surrogate (no UTF-8 form) is a ConversionError."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as err:
        bad = text[err.start : err.end].encode("unicode_escape").decode("ascii")
        raise ConversionError(
            f"text holds {bad}, a lone surrogate, which has no UTF-8 form", path=path
        ) from None


class Run:
    """Offsets and values of a run, field by field (no object per element): lists or arrays."""

    def __init__(self, nfields: int) -> None:
        self.headers: Any = []  # compact header offsets
        # per ref field: array header offsets, data offsets, the arrays
        self.array_at: list[Any] = [[] for _ in range(nfields)]
        self.data_at: list[Any] = [[] for _ in range(nfields)]
        self.arrays: list[list[np.ndarray]] = [[] for _ in range(nfields)]
        # per vlen field: byte counts, heap collection addresses, object indices
        self.counts: list[Any] = [[] for _ in range(nfields)]
        self.heaps: list[Any] = [[] for _ in range(nfields)]
        self.indices: list[Any] = [[] for _ in range(nfields)]
        # heap objects (offset, index, key bytes, key length), in the order allocated, and other
        # heap metadata put along the way (collection headers, free-space markers)
        self.object_at: Any = []
        self.object_index: Any = []
        self.object_raw: list[bytes] = []
        self.object_len: Any = []
        self.heap_puts: list[tuple[int, bytes]] = []
        # (planned runs) per key: offset in its collection, which collection (-1: the one
        # current before the run), size with padding; the current collection's length, free
        # bytes and objects after the run
        self.inner: Any = None
        self.owner: Any = None
        self.objsz: Any = None
        self.heap_after = (0, 0, 0)


class PairVector(Sequence[Any]):
    """The ``kvvec`` of a Dict (a fresh Vector{Pair{K,V}}, never shared, like JLD2's collect):
    its keys and values side by side, each Pair made only when it is written one by one."""

    __slots__ = ("firsts", "jt", "seconds")

    def __init__(self, firsts: list[Any], seconds: list[Any], jt: JT) -> None:
        self.firsts = firsts
        self.seconds = seconds
        self.jt = jt

    def __len__(self) -> int:
        return len(self.firsts)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [PairValue(a, b, self.jt) for a, b in zip(self.firsts[i], self.seconds[i])]
        return PairValue(self.firsts[i], self.seconds[i], self.jt)

    def __iter__(self) -> Any:
        return map(PairValue, self.firsts, self.seconds, repeat(self.jt))


class Form:
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


def form_of(writer: JLD2Writer, e: JT, item: Any) -> Form | None:
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
    form = Form(jt, plan, kinds, pair)
    form.arrays = arrays
    return form


def plan_run(
    writer: JLD2Writer, form: Form, items: Sequence[Any], first: int, count: int, ws: dict[Hashable, int]
) -> tuple[Run, int, int, int] | None:
    """Lay out up to ``count`` elements of ``items`` from ``first``: those that have ``form`` and
    are written by the plans alone (no array among them written before: in ``ws``, or twice in
    the run). Returns the run, its number of elements, and the span ``[start, end)`` it takes;
    the writer's end, heap and session are brought up to date. None when this form is not
    planned here (see the module docstring)."""
    kinds = form.fields
    if any(a == "vlen" and b == "vlen" for a, b in pairwise(kinds)):
        return None
    columns = _columns(form, items, first, count)
    k = _fitting(form, columns, ws)
    if k == 0:
        return _empty()
    columns = [c[:k] if len(c) > k else c for c in columns]
    run = Run(len(kinds))
    vlens = [f for f, kind in enumerate(kinds) if kind == "vlen"]
    raws = _key_bytes(columns, vlens)
    news = pack_keys(writer, run, raws, len(vlens)) if vlens else []
    start = writer.end
    end = _positions(writer, form, run, k, start, news, vlens)
    for f, spec in enumerate(form.arrays):
        if spec is not None:
            column = columns[f]
            run.arrays[f] = column
            writer._keepalive.extend(column)
            ws.update(zip(zip(repeat("id"), map(id, column)), (run.array_at[f] - BASE).tolist()))
    writer.end = end
    return run, k, start, end


def _empty() -> tuple[Run, int, int, int]:
    return Run(0), 0, 0, 0


def _columns(form: Form, items: Sequence[Any], first: int, count: int) -> list[list[Any]]:
    """The values of ``items[first : first + count]`` field by field, up to the first element that
    is not of the form's kind (a Pair of its type, a NamedTuple of its names)."""
    stop = min(len(items), first + count)
    if type(items) is PairVector:
        if items.jt is not form.jt:
            return [[] for _ in form.fields]
        return [items.firsts[first:stop], items.seconds[first:stop]]
    chunk = items[first:stop]
    if form.pair:
        k = _prefix(chunk, lambda p: type(p) is PairValue and p.jt is form.jt)
        return [[p.first for p in chunk[:k]], [p.second for p in chunk[:k]]]
    names = tuple(form.names)
    if set(map(type, chunk)) == {JlNamedTuple} and set(map(tuple, map(DATA, chunk))) == {names}:
        k = len(chunk)
    else:
        k = _prefix(chunk, lambda t: type(t) is JlNamedTuple and tuple(t._data) == names)
    rows = list(map(dict.values, map(DATA, chunk[:k])))
    return [list(c) for c in zip(*rows)] if rows else [[] for _ in names]


def _prefix(chunk: Sequence[Any], good: Any) -> int:
    """How many elements of ``chunk`` from its start are ``good``."""
    for i, x in enumerate(chunk):
        if not good(x):
            return i
    return len(chunk)


def _fitting(form: Form, columns: list[list[Any]], ws: dict[Hashable, int]) -> int:
    """How many elements (from the first) the plans write alone: each field's value of the kind
    planned (a ``str``; an array of the planned dtype and shape, not written before)."""
    k = min(map(len, columns))
    ids: list[int] = []
    for column, spec in zip(columns, form.arrays):
        if spec is None:
            if set(map(type, column[:k])) != {str}:
                k = _prefix(column, lambda v: type(v) is str)
            continue
        head = column[:k]
        if not (
            set(map(type, head)) == {np.ndarray}
            and all(d == spec[0] for d in set(map(DTYPE, head)))
            and set(map(SHAPE, head)) == {spec[1]}
        ):
            k = _prefix(head, _planned_array(spec[0], spec[1]))
        ids.extend(map(id, column[:k]))
    if not ids:
        return k
    fresh = ws.keys().isdisjoint(zip(repeat("id"), ids))
    if fresh and len(set(ids)) == len(ids):
        return k
    # An array met before: the run stops at the element holding it (the element by element
    # order of the checks: every field of one element, then the next element).
    refs = [c for c, spec in zip(columns, form.arrays) if spec is not None]
    seen: set[int] = set()
    for i in range(k):
        for column in refs:
            key = id(column[i])
            if key in seen or ("id", key) in ws:
                return i
            seen.add(key)
    return k


def _planned_array(dtype: np.dtype, shape: tuple[int, ...]) -> Any:
    """Whether a value is a numpy array of ``dtype`` and ``shape``."""
    return lambda v: type(v) is np.ndarray and v.dtype == dtype and v.shape == shape


def utf8_all(texts: list[str]) -> list[bytes]:
    """Every text's UTF-8 bytes (at C speed; ``utf8`` one by one when one has no UTF-8 form, which
    raises for it)."""
    try:
        return list(map(str.encode, texts))
    except UnicodeEncodeError:
        return [utf8(t, ()) for t in texts]


def _key_bytes(columns: list[list[Any]], vlens: list[int]) -> list[bytes]:
    """The keys' UTF-8 bytes in the order they are allocated (element by element, field by field)."""
    out: list[bytes] = []
    for f in vlens:
        raws = utf8_all(columns[f])
        if len(vlens) == 1:
            return raws
        out.append(raws)  # type: ignore[arg-type]
    return [r for row in zip(*out) for r in row]  # type: ignore[call-overload]


def pack_keys(writer: JLD2Writer, run: Run, raws: list[bytes], per: int) -> list[tuple[int, int]]:
    """Put each key in a global heap collection as ``write_heap_object`` does: the current one
    while it has room (and fewer than 65,535 objects), else a new one of ``max(size, 4096)``
    bytes. Fills the run's heap objects; returns ``(key number, size)`` per new collection
    (their places are known once the positions are, :func:`_positions`)."""
    gh = writer.heap
    m = len(raws)
    lens = np.fromiter(map(len, raws), np.int64, count=m)
    objsz = (lens + 23) & ~7  # 16 + the key, padded to 8
    sums = np.cumsum(objsz)
    inner = np.empty(m, np.int64)  # object offset in its collection
    index = np.empty(m, np.int64)
    owner = np.empty(m, np.int64)  # -1: the collection current before the run; i: the i-th new
    news: list[tuple[int, int]] = []
    free, length, held, cid = gh.free, gh.length, gh.count, -1
    a = 0
    while a < m:
        done = int(sums[a - 1]) if a else 0
        fit = int(np.searchsorted(sums, free - 16 + done, "left")) - a
        fit = max(0, min(fit, HEAP_FULL - held))
        if fit:
            b = a + fit
            inner[a:b] = 16 + length - free + (sums[a:b] - objsz[a:b] - done)
            index[a:b] = np.arange(held + 1, held + fit + 1)
            owner[a:b] = cid
            free -= int(sums[b - 1]) - done
            held += fit
            a = b
            if a == m:
                break
        size = max(int(objsz[a]), HEAP_MIN)  # key a opens a new collection
        cid += 1
        news.append((a, size))
        inner[a], index[a], owner[a] = 16, 1, cid
        length, free, held = size, size - int(objsz[a]), 1
        a += 1
    run.object_index = index
    run.object_raw = raws
    run.object_len = lens
    run.inner, run.owner, run.objsz = inner, owner, objsz
    run.heap_after = (length, free, held)
    return news


def _positions(
    writer: JLD2Writer,
    form: Form,
    run: Run,
    k: int,
    start: int,
    news: list[tuple[int, int]],
    vlens: list[int],
) -> int:
    """Every element's offsets (compact header, arrays' headers and data, new heap collections)
    from ``start``; fills ``run`` and the heap metadata to put; returns the end."""
    csize = form.plan[2]
    nv = len(vlens)
    refs = [(f, spec[2][1], spec[2][2]) for f, spec in enumerate(form.arrays) if spec is not None]
    headers = np.empty(k, np.int64)
    array_at = {f: np.empty(k, np.int64) for f, _, _ in refs}
    data_at = {f: np.empty(k, np.int64) for f, _, _ in refs}
    opens: dict[int, dict[int, int]] = {}  # element -> {vlen field: size of the collection it opens}
    for key, size in news:
        opens.setdefault(key // nv, {})[vlens[key % nv]] = size
    places: list[int] = []  # offset of each new collection

    def walk(p: int, i: int, made: dict[int, int]) -> int:
        """Element ``i`` at ``p``, one field after the other; returns its end."""
        headers[i] = p
        end = p + csize
        for f, kind in enumerate(form.fields):
            if kind == "vlen":
                size = made.get(f)
                if size is not None:
                    offset = end + -end % 8
                    places.append(offset)
                    end = offset + 16 + size
                continue
            _, hsize, datasz = form.arrays[f][2]  # type: ignore[index]
            array_at[f][i] = end
            data = end + hsize
            data += -data % 8
            data_at[f][i] = data
            end = data + datasz
        return end

    p, i = start, 0
    stops = [*sorted(opens), k]
    for stop in stops:
        while i < stop:  # elements that open no collection
            nxt = walk(p, i, {})
            stride = nxt - p
            if stride % 8 == 0 and stop - i > 1:  # the same offsets shifted: all at once
                shift = stride * np.arange(stop - i, dtype=np.int64)
                headers[i:stop] = p + shift
                for f, _, _ in refs:
                    array_at[f][i:stop] = array_at[f][i] + shift
                    data_at[f][i:stop] = data_at[f][i] + shift
                p += stride * (stop - i)
                i = stop
            else:
                p, i = nxt, i + 1
        if stop < k:
            p = walk(p, stop, opens[stop])
            i = stop + 1
    run.headers = headers
    for f, _, _ in refs:
        run.array_at[f] = array_at[f]
        run.data_at[f] = data_at[f]
    heap_places(writer, run, np.asarray(places, np.int64), news, vlens, k)
    return p


def heap_places(
    writer: JLD2Writer, run: Run, places: np.ndarray, news: list[tuple[int, int]], vlens: list[int], k: int
) -> None:
    """With the new collections placed: the heap objects' offsets, each key's vlen reference, the
    collection headers and the free-space markers of the collections left behind."""
    if not vlens:
        return
    gh = writer.heap
    inner, owner = run.inner, run.owner
    bases = np.concatenate(([gh.offset], places)) if len(places) else np.asarray([gh.offset], np.int64)
    home = bases[owner + 1]
    run.object_at = home + inner
    nv = len(vlens)
    heaps = (home - BASE).reshape(k, nv)
    lens = run.object_len.reshape(k, nv)
    index = run.object_index.reshape(k, nv)
    for j, f in enumerate(vlens):
        run.counts[f], run.heaps[f], run.indices[f] = lens[:, j], heaps[:, j], index[:, j]
    # A collection left behind gets the free-space marker after its last object (see
    # write_heap_object): the one current before the run gets the writer's own.
    lasts = [key - 1 for key, _ in news[1:]] + [len(inner) - 1]
    for c, ((key, size), offset) in enumerate(zip(news, places.tolist())):
        if c == 0:
            if key:
                writer._heap_marker = _marker(run, key - 1, gh.length)
            marker, writer._heap_marker = writer._heap_marker, None
            if marker is not None:
                run.heap_puts.append(marker)
        else:
            done = _marker(run, lasts[c - 1], news[c - 1][1])
            if done is not None:
                run.heap_puts.append(done)
        run.heap_puts.append((offset, enc.global_heap_header(size)))
    length, free, held = run.heap_after
    if news:
        gh.offset = int(places[-1])
    gh.length, gh.free, gh.count = length, free, held
    writer._heap_marker = _marker(run, len(inner) - 1, length)


def _marker(run: Run, last: int, length: int) -> tuple[int, bytes] | None:
    """The free-space object after key ``last`` (its collection ``length`` bytes long)."""
    size = int(run.objsz[last])
    free = length + 16 - int(run.inner[last]) - size
    if free < 16:
        return None
    return int(run.object_at[last]) + size, struct.pack("<QQ", 0, free - 16)
