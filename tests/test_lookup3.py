"""lookup3: the fast scalar and the numpy many-buffer implementations against a slow reference
(a direct transcription of Bob Jenkins' ``hashlittle``, kept here only as the oracle) and against
checksums libhdf5 itself wrote."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest

from treexchange._hdf5._lookup3 import lookup3, lookup3_in, lookup3_many

_M = 0xFFFFFFFF


def _rot(x: int, k: int) -> int:
    return ((x << k) | (x >> (32 - k))) & _M


def reference_lookup3(data: bytes, initval: int = 0) -> int:
    length = len(data)
    a = b = c = (0xDEADBEEF + length + initval) & _M
    i = 0
    while length > 12:
        a = (a + int.from_bytes(data[i : i + 4], "little")) & _M
        b = (b + int.from_bytes(data[i + 4 : i + 8], "little")) & _M
        c = (c + int.from_bytes(data[i + 8 : i + 12], "little")) & _M
        a = (a - c) & _M
        a ^= _rot(c, 4)
        c = (c + b) & _M
        b = (b - a) & _M
        b ^= _rot(a, 6)
        a = (a + c) & _M
        c = (c - b) & _M
        c ^= _rot(b, 8)
        b = (b + a) & _M
        a = (a - c) & _M
        a ^= _rot(c, 16)
        c = (c + b) & _M
        b = (b - a) & _M
        b ^= _rot(a, 19)
        a = (a + c) & _M
        c = (c - b) & _M
        c ^= _rot(b, 4)
        b = (b + a) & _M
        length -= 12
        i += 12
    if length == 0:
        return c
    tail = data[i:] + bytes(12 - length)
    a = (a + int.from_bytes(tail[0:4], "little")) & _M
    b = (b + int.from_bytes(tail[4:8], "little")) & _M
    c = (c + int.from_bytes(tail[8:12], "little")) & _M
    c ^= b
    c = (c - _rot(b, 14)) & _M
    a ^= c
    a = (a - _rot(c, 11)) & _M
    b ^= a
    b = (b - _rot(a, 25)) & _M
    c ^= b
    c = (c - _rot(b, 16)) & _M
    a ^= c
    a = (a - _rot(c, 4)) & _M
    b ^= a
    b = (b - _rot(a, 14)) & _M
    c ^= b
    c = (c - _rot(b, 24)) & _M
    return c


def _buffers(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    every_length = [rng.randbytes(n) for n in range(0, 100)]  # every tail length, 0..8 blocks
    headers = [rng.randbytes(rng.choice([96, 180, 181, 260, 1000])) for _ in range(200)]
    return every_length + headers + [b"\xff" * 4096, bytes(37)]


def test_published_vectors() -> None:
    assert lookup3(b"") == 0xDEADBEEF
    assert lookup3(b"Four score and seven years ago") == 0x17770551
    assert lookup3(b"Four score and seven years ago", 1) == 0xCD628161
    assert lookup3_many([b"", b"Four score and seven years ago"]) == [0xDEADBEEF, 0x17770551]


@pytest.mark.parametrize("initval", [0, 1, 0xDEADBEEF, _M])
def test_scalar_equals_reference(initval: int) -> None:
    for data in _buffers(initval & 0xFF):
        assert lookup3(data, initval) == reference_lookup3(data, initval), len(data)


@pytest.mark.parametrize("initval", [0, 7, _M])
def test_many_equals_reference(initval: int) -> None:
    buffers = _buffers(1)
    # Inputs of every kind the writer passes: bytes, bytearray, memoryview (many of equal size).
    mixed = [
        bytearray(b) if i % 3 == 1 else memoryview(b) if i % 3 == 2 else b for i, b in enumerate(buffers)
    ]
    assert lookup3_many(mixed, initval) == [reference_lookup3(b, initval) for b in buffers]
    assert lookup3_many([], initval) == []


def test_checksums_written_by_libhdf5(tmp_path: Path) -> None:
    """Object headers v2 of a file written by libhdf5 (latest format): checksum = lookup3(body)."""
    path = tmp_path / "h.h5"
    with h5py.File(path, "w", libver="latest") as f:
        for i in range(20):
            f.create_dataset(f"d{i}", data=np.arange(i + 1))
    raw = path.read_bytes()
    bodies, stored = [], []
    pos = raw.find(b"OHDR")
    while pos >= 0:
        flags = raw[pos + 5]
        width = 1 << (flags & 3)
        at = pos + 6 + (16 if flags & 0x20 else 0) + (4 if flags & 0x10 else 0)
        size = int.from_bytes(raw[at : at + width], "little")
        end = at + width + size
        bodies.append(raw[pos:end])
        stored.append(struct.unpack("<I", raw[end : end + 4])[0])
        pos = raw.find(b"OHDR", end)
    assert len(bodies) >= 20
    assert [lookup3(b) for b in bodies] == stored
    assert lookup3_many(bodies) == stored


@pytest.mark.parametrize("initval", [0, 7])
def test_in_equals_scalar_for_templated_slices(initval: int) -> None:
    """Slices made from one template (the writer's headers: alike up to an address or a heap
    reference near their end) share leading blocks, which ``lookup3_in`` mixes once: every
    length, every place of the first differing byte, two templates of one length mixed."""
    rng = np.random.default_rng(initval)
    for n in [1, 11, 12, 13, 24, 25, 59, 87, 95, 126, 200]:
        templates = [rng.integers(0, 256, n, dtype=np.uint8) for _ in range(2)]
        rows = []
        for r in range(40):
            row = templates[r % 7 == 0].copy()
            if r % 3:
                at = int(rng.integers(0, n))
                row[at:] = rng.integers(0, 256, n - at, dtype=np.uint8)
            rows.append(row)
        buf = np.concatenate([np.zeros(5, np.uint8), *rows])
        offsets = [5 + n * r for r in range(len(rows))]
        got = lookup3_in(buf, offsets, [n] * len(rows), initval).tolist()
        assert got == [lookup3(row.tobytes(), initval) for row in rows]
