"""A global heap collection parsed with the objects a reader expects (``expect=``, the keys of
a Dict about to be read) holds exactly what the object-by-object scan finds: when the guess is
right, when it is wrong in any way (then the scan decides), and when the collection is damaged
(then the scan's error is raised, not a wrong answer)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from treexchange import FormatError
from treexchange._hdf5._cursor import Cursor
from treexchange._hdf5._globalheap import GlobalHeapCollection

_KEYS = [f"key{i:04d}" + "x" * (i % 7) for i in range(40)]


def _collection(bodies: list[tuple[int, bytes]], *, slack: int = 64, free_space: bool = True) -> bytes:
    """A ``GCOL`` collection holding ``(index, body)`` objects in this order."""
    objects = b""
    for index, body in bodies:
        objects += struct.pack("<HH4xQ", index, 1, len(body)) + body + bytes(-len(body) % 8)
    if free_space:
        objects += struct.pack("<HH4xQ", 0, 0, slack)
    objects += bytes(slack)
    return b"GCOL" + bytes([1, 0, 0, 0]) + struct.pack("<Q", 16 + len(objects)) + objects


def _parse(raw: bytes, expect: tuple[np.ndarray, np.ndarray] | None) -> dict[int, int]:
    return GlobalHeapCollection(Cursor(memoryview(raw), 0), 0, expect).objects


def _expect(keys: list[str], first: int = 1) -> tuple[np.ndarray, np.ndarray]:
    indices = np.arange(first, first + len(keys), dtype=np.uint32)
    return indices, np.array([len(k.encode()) for k in keys], np.uint32)


def test_right_guess_gives_what_the_scan_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _collection([(i + 1, k.encode()) for i, k in enumerate(_KEYS)])
    scanned = _parse(raw, None)
    assert len(scanned) == len(_KEYS)
    starts: list[int] = []
    scan = GlobalHeapCollection._scan

    def recording(self: GlobalHeapCollection, buf: memoryview, pos: int, end: int) -> None:
        starts.append(pos)
        scan(self, buf, pos, end)

    monkeypatch.setattr(GlobalHeapCollection, "_scan", recording)
    assert _parse(raw, _expect(_KEYS)) == scanned
    assert starts == [raw.rindex(_KEYS[-1].encode()) + 16]  # scanned only after the guessed ones


def test_objects_after_the_expected_ones_are_scanned() -> None:
    """Fewer keys expected than the collection holds (and a later object reusing an index):
    the rest is scanned in order, the later object winning as in the scan."""
    bodies = [(i + 1, k.encode()) for i, k in enumerate(_KEYS)] + [(3, b"again"), (99, b"tail")]
    raw = _collection(bodies)
    assert _parse(raw, _expect(_KEYS[:20])) == _parse(raw, None)
    assert 99 in _parse(raw, _expect(_KEYS[:20]))


@pytest.mark.parametrize(
    "expect",
    [
        _expect([k + "?" for k in _KEYS]),  # every size wrong
        _expect([*_KEYS[:10], "a", *_KEYS[11:]]),  # one size wrong
        _expect(_KEYS, first=2),  # not from index 1
        (np.array([1, 2, 4, *list(range(5, 42))], np.uint32), _expect(_KEYS)[1]),  # a gap
        _expect([*_KEYS, "more", "keys"]),  # more than the collection holds
    ],
    ids=["sizes", "one-size", "start", "gap", "too-many"],
)
def test_wrong_guess_falls_back_to_the_scan(expect: tuple[np.ndarray, np.ndarray]) -> None:
    raw = _collection([(i + 1, k.encode()) for i, k in enumerate(_KEYS)])
    assert _parse(raw, expect) == _parse(raw, None)


def test_objects_out_of_index_order_fall_back_to_the_scan() -> None:
    bodies = [(i + 1, k.encode()) for i, k in enumerate(_KEYS)]
    bodies[5], bodies[6] = bodies[6], bodies[5]
    raw = _collection(bodies)
    assert _parse(raw, _expect(_KEYS)) == _parse(raw, None)


def test_object_past_the_collection_is_refused_either_way() -> None:
    """The last object claims more bytes than its collection has: the guess (which matches the
    lying size) is not taken, and the scan's FormatError is raised."""
    bodies = [(i + 1, k.encode()) for i, k in enumerate(_KEYS)]
    raw = bytearray(_collection(bodies, slack=0, free_space=False))
    last_size_at = raw.rindex(_KEYS[-1].encode()) - 8
    raw[last_size_at : last_size_at + 8] = struct.pack("<Q", 1 << 20)
    sizes = _expect(_KEYS)[1]
    sizes[-1] = 1 << 20
    for expect in (None, (_expect(_KEYS)[0], sizes)):
        with pytest.raises(FormatError, match="runs past its collection"):
            _parse(bytes(raw), expect)
