"""Dicts of Dicts written at once: a run of a Dict's Pairs whose values are Dicts of small arrays.

A state held as a Dict of Dicts (``{"layer1": {"weight": w, "bias": b}, ...}``; the benchmark's
1,000 inner Dicts of 100 arrays) is a vector of references to Pairs whose value is a Dict: its
dataset (a compact scalar header holding one reference), its Pair vector (a contiguous array of
references) and that Dict's own Pairs (a key in the global heap, a small array). Written one inner
Dict at a time, each costs some fifty Python calls and a bulk run of its own
(:mod:`._writer_bulk`): at 100 arrays a Dict, most of the save.

:func:`write_dict_run` lays out a run of such outer Pairs at once, their inner Pairs included,
when the inner Dicts are alike: one Dict type, one number of entries, String keys, and arrays of
one dtype and shape whose small-array plan the writer holds. The one-by-one path allocates a
sequence of *slots*, each a compact header, its key, then the rest:

* an outer slot: the Pair's header, its key, the Dict's header, the Pair vector's header and its
  8-aligned data (the references to the inner Pairs);
* then one inner slot per entry: the Pair's header, its key, the array's header and 8-aligned data.

Keys go to the global heap in slot order (:func:`._writer_runs.pack_keys`); a key that opens a
new collection puts it 8-aligned right after its slot's header. A slot ends with 8-aligned data,
so it ends at an offset that is its data's size modulo 8: where each slot starts modulo 8 follows
from the slot before it, hence each slot's size, and every offset from one cumulative sum. The
bytes are then assembled row by row (:mod:`._writer_rows`). ``tests/test_write_bulk.py`` compares
the file with the one the one-by-one path writes.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import TreexchangeError, WriteError
from ._writer_rows import (
    hand_over,
    open_region,
    place_arrays,
    place_heap,
    put_array_headers,
    put_compact,
    put_rows,
)
from ._writer_runs import (
    BASE,
    DTYPE as _DTYPE,
    SHAPE as _SHAPE,
    PairValue,
    PairVector,
    Run,
    form_of,
    heap_places,
    pack_keys,
    utf8_all,
)
from ._writer_types import JT, Cat

if TYPE_CHECKING:
    from ._writer import JLD2Writer

Spec = tuple[np.dtype, tuple[int, ...], tuple[bytes, int, int]]  # dtype, shape, small-array plan
_KEY_GUESS = 24  # bytes a key takes in the heap, for sizing a run (16-byte head, a short key)


class DictForm:
    """What every element of a run shares: the outer Pair type and its compact-header plan, the
    inner Dict type, its header's plan and its Pair vector's header (for ``n`` entries), the inner
    Pairs' compact-header plan, and per entry (by position) the dtype, shape and small-array plan
    of its array (a Dict of layers: a weight and a bias of other shapes)."""

    __slots__ = (
        "dict_jt",
        "dict_plan",
        "dtypes",
        "groups",
        "jt",
        "kv_head",
        "kv_size",
        "n",
        "pair_plan",
        "plan",
        "shapes",
        "size",
        "specs",
    )

    def __init__(
        self,
        jt: JT,
        plan: tuple[JT, bytes, int, int, bytes],
        dict_jt: JT,
        made: tuple[tuple[JT, bytes, int, int, bytes], JT, bytes, int],
        pair_plan: tuple[JT, bytes, int, int, bytes],
        specs: list[Spec],
    ) -> None:
        self.jt, self.plan, self.dict_jt, self.pair_plan = jt, plan, dict_jt, pair_plan
        self.dict_plan, _, self.kv_head, self.kv_size = made
        self.n = len(specs)
        self.specs = specs
        self.dtypes = [spec[0] for spec in specs]
        self.shapes = [spec[1] for spec in specs]
        # the entry positions of each kind of array (one group when all are alike)
        groups: dict[tuple[Any, ...], list[int]] = {}
        for j, spec in enumerate(specs):
            groups.setdefault((spec[0], spec[1]), []).append(j)
        self.groups = [(specs[cols[0]], cols) for cols in groups.values()]
        # about the bytes one element takes (its inner slots included): the run's length
        inner = sum(pair_plan[2] + _KEY_GUESS + s[2][1] + 7 + s[2][2] for s in specs)
        self.size = plan[2] + _KEY_GUESS + self.dict_plan[2] + self.kv_size + 7 + 8 * self.n + inner


def dict_form_of(writer: JLD2Writer, e: JT, items: Sequence[Any], i: int, budget: int) -> DictForm | None:
    """The form of ``items[i]`` (an element of a Dict's Pair vector, element type ``e``) when it
    is a String key and an alike inner Dict that :func:`write_dict_run` lays out; None else (or
    until the writer's plans for it exist: made by writing the first one one by one). An inner
    Dict larger than about ``budget`` bytes has none: written one by one, its own Pairs go in
    runs of that size (a run is laid out in memory whole)."""
    if type(items) is not PairVector or items.jt is not e or e.writeas is not e:
        return None
    key, value = items.firsts[i], items.seconds[i]
    if type(key) is not str or not isinstance(value, dict) or not value:
        return None
    plan = writer._compact_plans.get(id(e))
    w = e.writeas
    if plan is None or plan[0] is not e or e.mutable or w.cat is not Cat.STRUCT or len(w.fields) != 2:
        return None
    if writer.field_kind(w, False) != "ref":
        return None
    (_, kt), (_, vt) = w.fields
    if kt.writeas is not kt or kt.cat is not Cat.STRING or writer.field_kind(kt, True) != "vlen":
        return None
    vw = vt.writeas
    if writer.field_kind(vw, True) != "ref" or (vw is not vt and vw.cat is Cat.ARRAY):
        return None  # (a field holding the Dict's Pair vector itself: JLD2 < v0.4.42)
    try:
        dict_jt = writer.types.of_value(value)
    except TreexchangeError:
        return None  # (reported with its path by the one-by-one path)
    made = writer.dict_plan(dict_jt, len(value))
    if made is None:
        return None
    pair = made[1]
    specs: list[Spec] = []
    pair_plan = None
    size = 0
    for k, v in value.items():
        inner = form_of(writer, pair, PairValue(k, v, pair))
        if inner is None or not inner.pair or inner.fields != ["vlen", "ref"] or inner.plan[0] is not pair:
            return None
        spec = inner.arrays[1]
        assert spec is not None
        size += spec[2][1] + spec[2][2]
        if size > budget:
            return None
        specs.append(spec)
        pair_plan = inner.plan
    assert pair_plan is not None
    return DictForm(e, plan, dict_jt, made, pair_plan, specs)


def write_dict_run(
    writer: JLD2Writer, form: DictForm, items: Sequence[Any], first: int, ws: dict[Hashable, int], budget: int
) -> tuple[bytes, int]:
    """Write ``items[first:j]`` (a Dict's Pair vector) at once, for the longest ``j`` within about
    ``budget`` bytes whose elements have ``form`` and are written by the plans alone (no inner
    Dict or array among them written before: in ``ws``, or twice in the run); their references
    (8 bytes each) and ``j``."""
    assert type(items) is PairVector
    count = max(1, budget // form.size)
    stop = min(len(items), first + count)
    keys, dicts = items.firsts[first:stop], items.seconds[first:stop]
    k, inner_keys, arrays = _fitting(writer, form, keys, dicts, ws)
    if k == 0:
        return b"", first
    keys, dicts = keys[:k], dicts[:k]
    n = form.n
    m = 1 + n  # slots per element
    raws = np.empty((k, m), object)
    raws[:, 0] = utf8_all(keys)
    raws[:, 1:] = np.asarray(utf8_all(inner_keys), object).reshape(k, n)
    run = Run(1)
    news = pack_keys(writer, run, raws.ravel().tolist(), 1)
    start = writer.end
    p, coll, rest, data, end = _slots(form, k, start, news)
    heap_places(writer, run, coll[[key for key, _ in news]], news, [0], k * m)

    # The offsets, element by element (rows) and slot by slot (columns: 0 the outer slot).
    p, rest, data = p.reshape(k, m), rest.reshape(k, m), data.reshape(k, m)
    counts, heaps, indices = (c.reshape(k, m) for c in (run.counts[0], run.heaps[0], run.indices[0]))
    headers, dict_at, kv_data = p[:, 0], rest[:, 0], data[:, 0]
    kv_at = dict_at + form.dict_plan[2]
    pairs_at = p[:, 1:].ravel()
    array_at, data_at = rest[:, 1:].ravel(), data[:, 1:].ravel()

    region, found = open_region(writer, start, end)
    sums: list[tuple[np.ndarray, int]] = []
    outside = place_heap(region, start, run)
    put_compact(
        region, headers - start, form.plan, [(counts[:, 0], heaps[:, 0], indices[:, 0]), dict_at], sums
    )
    put_compact(region, dict_at - start, form.dict_plan, [kv_at], sums)
    put_array_headers(region, kv_at - start, form.kv_head, 8 * n, kv_data, sums)
    put_rows(region, kv_data - start, (pairs_at - BASE).astype("<u8").view(np.uint8).reshape(k, 8 * n))
    vlens = (counts[:, 1:].ravel(), heaps[:, 1:].ravel(), indices[:, 1:].ravel())
    put_compact(region, pairs_at - start, form.pair_plan, [vlens, array_at], sums)
    for spec, cols in form.groups:
        if len(cols) == n:
            place_arrays(region, start, spec, array_at, data_at, arrays, sums)
        else:  # the entries at positions cols of every Dict (their offsets ascending)
            picked = [i * n + j for i in range(k) for j in cols]
            place_arrays(
                region, start, spec, array_at[picked], data_at[picked], [arrays[i] for i in picked], sums
            )
    hand_over(writer, region, found, start, sums, outside)

    # What write_dataset records of the inner Dicts and arrays (tracked by identity).
    ws.update(zip(zip(repeat("id"), map(id, dicts)), (dict_at - BASE).tolist()))
    ws.update(zip(zip(repeat("id"), map(id, arrays)), (array_at - BASE).tolist()))
    writer._keepalive.extend(dicts)
    writer._keepalive.extend(arrays)
    writer.end = end
    return (headers - BASE).astype("<u8").tobytes(), first + k


def _slots(
    form: DictForm, k: int, start: int, news: list[tuple[int, int]]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Each slot's start, the place of the collection its key would open, the start of what
    follows its key (the Dict's header, an array's header) and of its data; the run's end."""
    n = form.n
    m = 1 + n
    slots = k * m
    head = np.full(slots, form.pair_plan[2], np.int64)  # the compact header before the key
    head[::m] = form.plan[2]
    # headers between the key and the data; the data
    mid = np.tile(np.asarray([form.dict_plan[2] + form.kv_size] + [s[2][1] for s in form.specs], np.int64), k)
    tail = np.tile(np.asarray([8 * n] + [s[2][2] for s in form.specs], np.int64), k)
    grow = np.zeros(slots, np.int64)  # bytes of the collection the slot's key opens (none: 0)
    if news:
        keys, opened = zip(*news)
        grow[list(keys)] = opened
    opens = grow > 0

    def layout(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        key = p + head
        coll = key + (-key % 8)
        rest = np.where(opens, coll + 16 + grow, key)
        data = rest + mid
        data += -data % 8
        return coll, rest, data, data + tail

    # A slot ends with 8-aligned data: the next one starts at its data size modulo 8.
    mod = np.empty(slots, np.int64)
    mod[0] = start % 8
    mod[1:] = tail[:-1] % 8
    sizes = layout(mod)[3] - mod
    p = np.empty(slots, np.int64)
    p[0] = start
    np.cumsum(sizes[:-1], out=p[1:])
    p[1:] += start
    coll, rest, data, ends = layout(p)
    if not np.array_equal(ends[:-1], p[1:]):
        raise WriteError("internal: a Dict run's slots do not follow each other")
    return p, coll, rest, data, int(ends[-1])


def _fitting(
    writer: JLD2Writer, form: DictForm, keys: list[Any], dicts: list[Any], ws: dict[Hashable, int]
) -> tuple[int, list[Any], list[Any]]:
    """How many elements (from the first) the plans write alone, and their inner keys and arrays
    (entry by entry): a ``str`` key, a Dict of the form's type and size holding ``str`` keys and
    arrays of the planned dtype and shape, none of them met before."""
    k = len(keys)
    if set(map(type, keys)) != {str}:
        k = next(i for i, key in enumerate(keys) if type(key) is not str)
    types = writer.types
    n, jt = form.n, form.dict_jt
    for i in range(k):
        d = dicts[i]
        if not isinstance(d, dict) or len(d) != n or types.of_value(d) is not jt:
            k = i
            break
    if k == 0:
        return 0, [], []
    inner_keys = list(chain.from_iterable(dicts[:k]))
    arrays = list(chain.from_iterable(map(dict.values, dicts[:k])))
    if not (
        set(map(type, inner_keys)) == {str}
        and set(map(type, arrays)) == {np.ndarray}
        and list(map(_SHAPE, arrays)) == form.shapes * k
        and list(map(_DTYPE, arrays)) == form.dtypes * k
    ):
        k = next((i for i in range(k) if not _entries_fit(form, dicts[i])), k)
        inner_keys, arrays = inner_keys[: k * n], arrays[: k * n]
    if k == 0:
        return 0, [], []
    # Tracked by identity: an inner Dict or array met before stops the run at the element holding
    # it (in the one-by-one order: the Dict, then its arrays).
    ids = [*map(id, dicts[:k]), *map(id, arrays)]
    if len(set(ids)) != len(ids) or not ws.keys().isdisjoint(zip(repeat("id"), ids)):
        seen: set[int] = set()
        for i in range(k):
            for x in chain((dicts[i],), arrays[i * n : (i + 1) * n]):
                if id(x) in seen or ("id", id(x)) in ws:
                    return i, inner_keys[: i * n], arrays[: i * n]
                seen.add(id(x))
    return k, inner_keys, arrays


def _entries_fit(form: DictForm, d: dict[Any, Any]) -> bool:
    """Whether the entries of ``d`` are those of the form: ``str`` keys, arrays of its dtypes and
    shapes in their order."""
    return all(
        type(key) is str and type(v) is np.ndarray and v.dtype == dtype and v.shape == shape
        for (key, v), dtype, shape in zip(d.items(), form.dtypes, form.shapes)
    )
