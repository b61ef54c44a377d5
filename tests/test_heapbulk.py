"""Global heap collections parsed in bulk (the keys of a Dict) hold exactly what the
object-by-object scan finds, whatever the collections hold and whichever objects are wanted:
objects not asked for between the wanted ones, indices reused later, objects out of order,
damaged bytes, lying counts. And the texts cut from them are what decoding each key gives."""

from __future__ import annotations

import random
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import treexchange as tx
from treexchange._hdf5._cursor import Cursor
from treexchange._hdf5._globalheap import SIZE_SHIFT, GlobalHeapCollection
from treexchange._hdf5._heapbulk import predict_collections
from treexchange._jld2 import _bulktext
from treexchange._jld2._bulktext import _texts
from treexchange._jld2._plans import decode_text
from treexchange._jld2._reader import Reader


class _File:
    """What predict_collections uses of an HDF5File."""

    def __init__(self, raw: bytes) -> None:
        self.buffer = memoryview(raw)
        self.base, self.length_size = 0, 8
        self._heaps: dict[int, GlobalHeapCollection] = {}


def _collection(bodies: list[tuple[int, bytes]], *, free_space: bool) -> bytes:
    objects = b"".join(
        struct.pack("<HH4xQ", index, 1, len(body)) + body + bytes(-len(body) % 8) for index, body in bodies
    )
    if free_space:
        objects += struct.pack("<HH4xQ", 0, 0, 64)
    objects += bytes(64)
    return b"GCOL" + bytes([1, 0, 0, 0]) + struct.pack("<Q", 16 + len(objects)) + objects


def _scanned(raw: bytes, at: int) -> dict[int, int] | None:
    try:
        return GlobalHeapCollection(Cursor(memoryview(raw), 0), at).objects
    except Exception:
        return None


@pytest.mark.parametrize("asked", [0.9, 1.0], ids=["some-unasked", "all-asked"])
@pytest.mark.parametrize("seed", range(6))
def test_bulk_parse_is_the_scan(seed: int, asked: float) -> None:
    """(all-asked: every object wanted, the usual case that ``_predict_whole`` takes, or leaves
    to the general prediction when an index is wanted twice.)"""
    rng = random.Random(seed)
    predicted = 0
    for _ in range(60):
        raw, wanted = b"\0" * 8, []
        for _ in range(rng.randint(1, 5)):
            n = rng.randint(1, 30)
            bodies = [(i + 1, bytes(rng.randint(0, 20))) for i in range(n)]
            if rng.random() < 0.2:
                bodies.append((rng.randint(1, n), b"again"))  # a later object reusing an index
            if rng.random() < 0.1 and n > 3:
                bodies[1], bodies[2] = bodies[2], bodies[1]
            at = len(raw)
            raw += _collection(bodies, free_space=rng.random() < 0.8)
            for index, body in bodies:
                if rng.random() < asked:  # some objects not asked for
                    lie = 1 if rng.random() < 0.02 else 0
                    wanted.append((at, index, len(body) + lie))
        if rng.random() < 0.3:
            damaged = bytearray(raw)
            damaged[rng.randrange(len(raw))] = rng.randrange(256)
            raw = bytes(damaged)
        if not wanted:
            continue
        rng.shuffle(wanted)
        h5 = _File(raw)
        columns = [
            np.array(col, dtype) for col, dtype in zip(zip(*wanted), (np.uint64, np.uint32, np.uint32))
        ]
        found = predict_collections(h5, *columns)  # type: ignore[arg-type]
        for at, heap in h5._heaps.items():
            assert heap.offset == at
            assert _scanned(raw, at) == heap.objects
            assert list(heap.objects) == list(_scanned(raw, at) or ())  # file order
        for (at, index, _), code in zip(wanted, found.tolist()):
            if code:
                predicted += 1
                assert h5._heaps[at].objects[index] == code
    assert predicted > 500  # the usual case is predicted, not left to the scan


def test_texts_are_each_key_decoded() -> None:
    rng = random.Random(7)
    alphabet = [0x00, 0x41, 0x7A, 0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80, 0xFF, 0xED, 0xA0]
    for _ in range(500):
        keys = [
            bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(rng.randint(1, 8))
        ]
        codes, pos = [], 0
        for key in keys:
            codes.append(len(key) << SIZE_SHIFT | pos)
            pos += len(key)
        pad = bytes(rng.choice((0, 64)))  # (0: the last text ends the buffer)
        got = _texts(memoryview(b"".join(keys) + pad), np.array(codes, np.uint64))
        assert got == [decode_text(k) for k in keys]


def _keys_everywhere(node: Any) -> list[Any]:
    if node.kind != "dict":
        return [node.path, node.shape, str(node.dtype)]
    return [(k, _keys_everywhere(node[k])) for k in node.keys()]


def test_dict_of_dicts_walk_parses_its_key_collections_in_bulk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keys of a Dict of Dicts (an outer key between each inner Dict's keys, in heap
    collections they share) are found without the object-by-object parse of their collections
    (the inner Dicts' keys read first), and the walk gives what it gives with that parse alone
    and with the Pairs of each inner Dict read on their own."""
    tree = tx.JuliaDict()
    for g in range(30):
        inner = tree.setdefault(f"g{g:03d}", tx.JuliaDict())
        for i in range(40 + g % 4):
            inner[("ü" if i % 11 == 0 else "") + f"w{g}_{i}"] = np.full(i % 3 + 1, g, np.float32)
    path = tmp_path / "dicts.jld2"
    tx.save(path, st=tree)
    parsed: list[int] = []
    init = GlobalHeapCollection.__init__

    def counting(self: GlobalHeapCollection, *args: Any) -> None:
        parsed.append(args[1])
        init(self, *args)

    monkeypatch.setattr(GlobalHeapCollection, "__init__", counting)
    with tx.open(path) as f:
        bulk = _keys_everywhere(f["st"])
    collections = len(re.findall(b"GCOL", path.read_bytes()))
    assert collections >= 8 and len(parsed) <= 1  # (the first: committed types' names before keys)
    monkeypatch.setattr(_bulktext, "predict_collections", lambda h5, a, i, s: np.zeros(len(a), np.int64))
    monkeypatch.setattr(Reader, "primed_pairs", lambda self, plan, buf, off: None)
    with tx.open(path) as f:
        assert _keys_everywhere(f["st"]) == bulk
    assert len(parsed) > collections // 2
    assert bulk[5][0] == "g005" and bulk[5][1][0][0] == "üw5_0"


@pytest.mark.parametrize("gathered_max", [1 << 24, 1000], ids=["gathered", "each"])
def test_long_keys_read_in_bulk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gathered_max: int) -> None:
    """Keys of 32 KiB and more (their heap objects' sizes do not fit the packed int64 codes), and
    keys whose bytes are read one by one beyond the gathered bound, are what `load` gives."""
    monkeypatch.setattr(_bulktext, "_GATHERED_MAX", gathered_max)
    keys = [f"k{i:03d}" + ("é" * 20_000 if i % 10 == 3 else "") for i in range(40)]
    path = tmp_path / "long.jld2"
    tx.save(path, st=tx.JuliaDict({k: np.arange(2.0) + i for i, k in enumerate(keys)}))
    with tx.open(path) as f:
        assert f["st"].keys() == keys
        assert f["st"][keys[13]].shape == (2,)
    assert list(tx.load(path)["st"]) == keys


def test_vlen_fields_strided_or_gathered_alike() -> None:
    """The vlen elements' count, collection and index fields read through strided views (evenly
    spaced elements) are what gathering each element's 16 bytes gives (any spacing)."""
    rng = np.random.default_rng(3)
    buf = rng.integers(0, 256, 4000, dtype=np.uint8).tobytes()
    raw = np.frombuffer(buf, np.uint8)
    for offsets in (
        np.arange(5, 3900, 24),
        np.arange(0, 64, 16),
        np.array([7]),
        np.array([0, 40, 56, 300]),
        range(5, 3900, 24),
        range(7, 8),
        range(3, 300, 9),  # (overlapping elements: gathered)
    ):
        got = _bulktext._fields(buf, raw, offsets)
        rows = [buf[o : o + 16] for o in list(offsets)]
        want = [
            [struct.unpack_from(f, r, at)[0] for r in rows] for f, at in (("<I", 0), ("<Q", 4), ("<I", 12))
        ]
        assert [g.tolist() for g in got] == want
