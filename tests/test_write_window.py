"""The sink's metadata window (treexchange/_jld2/_writer_sink.py): pieces land in a zeroed buffer by
offset and are written out in one call per window; pieces below the window (a header reserved
before what it points to, filled in after the window moved on) are written after it; payloads
written directly are holes the window never overwrites; pieces larger than the window go out on
their own. Random sequences of what the writer does, checked against a plain model of the file
(a bytearray with every write applied in order), through a real file (writer thread) and an
in-memory one."""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import pytest

from treexchange._hdf5._lookup3 import lookup3, lookup3_in, lookup3_many
from treexchange._jld2 import _writer_sink
from treexchange._jld2._writer_sink import Sink


def _ops(seed: int, *, big: bool) -> tuple[list[tuple[str, int, object]], int]:
    """A writer-like sequence: space allocated front to back; headers reserved and filled in
    later (checksummed); small pieces, overwrites, unwritten gaps; payloads (bytes or arrays)."""
    rng = random.Random(seed)
    ops: list[tuple[str, int, object]] = []
    end = 48
    reserved: list[tuple[int, int]] = []
    plain: list[tuple[int, int]] = []
    for _ in range(rng.randint(50, 400)):
        r = rng.random()
        if r < 0.25:  # reserve a header, filled in later
            n = rng.randint(8, 300)
            reserved.append((end, n))
            end += n + 4
        elif r < 0.5:
            n = rng.randint(1, 5000)
            ops.append(("put", end, rng.randbytes(n)))
            plain.append((end, n))
            end += n
        elif r < 0.6 and plain:  # a later write over part of an earlier one: it wins
            at, n = rng.choice(plain)
            k = rng.randint(1, n)
            ops.append(("put", at + rng.randint(0, n - k), rng.randbytes(k)))
        elif r < 0.7:
            end += rng.randint(1, 3000)  # a gap never written: reads as zeros
        elif r < 0.8:
            n = rng.randint(1, 100_000) if not (big and rng.random() < 0.1) else rng.randint(5 << 20, 7 << 20)
            ops.append(("large", end, rng.randbytes(n)))
            end += n
        elif r < 0.85:
            shape = (rng.randint(1, 300), rng.randint(1, 300))
            arr = np.asarray(np.random.default_rng(rng.randint(0, 1000)).integers(0, 255, shape), np.uint8)
            ops.append(("array", end, arr))
            end += arr.nbytes
        elif r < 0.9 and big:
            n = rng.randint(5 << 20, 6 << 20)  # a piece of metadata larger than the window
            ops.append(("put", end, rng.randbytes(n)))
            end += n
        elif reserved:
            at, n = reserved.pop(rng.randrange(len(reserved)))
            ops.append(("sum", at, rng.randbytes(n)))
    for at, n in reserved:
        ops.append(("sum", at, rng.randbytes(n)))
    return ops, end


def _expected(ops: list[tuple[str, int, object]], size: int) -> bytes:
    out = bytearray(size)
    for kind, at, data in ops:
        if kind == "array":
            raw = np.asarray(data).tobytes(order="F")
        elif kind == "sum":
            raw = bytes(data) + lookup3(bytes(data)).to_bytes(4, "little")  # type: ignore[arg-type]
        else:
            raw = bytes(data)  # type: ignore[arg-type]
        out[at : at + len(raw)] = raw
    return bytes(out)


def _run(sink: Sink, ops: list[tuple[str, int, object]], size: int) -> None:
    for kind, at, data in ops:
        if kind == "put":
            sink.put(at, data)  # type: ignore[arg-type]
        elif kind == "sum":
            sink.put_checksummed(at, data)  # type: ignore[arg-type]
        elif kind == "large":
            sink.put_large(at, data)  # type: ignore[arg-type]
        else:
            sink.put_array(at, data)  # type: ignore[arg-type]
    sink.finish(size)


@pytest.mark.parametrize("seed", range(12))
def test_random_writes_land_as_a_plain_file_would_have_them(seed: int, tmp_path: Path) -> None:
    ops, size = _ops(seed, big=seed % 4 == 3)
    expected = _expected(ops, size)
    path = tmp_path / "w.bin"
    with open(path, "w+b") as f:
        _run(Sink(f), ops, size)
    assert path.read_bytes() == expected
    memory = io.BytesIO()
    _run(Sink(memory), ops, size)
    _assert_same_in_memory(memory.getvalue(), expected)


def _assert_same_in_memory(got: bytes, expected: bytes) -> None:
    # (truncate does not extend an in-memory file: it ends at the last byte written)
    assert got == expected[: len(got)]
    assert not expected[len(got) :].strip(b"\0")


def test_a_small_window_is_flushed_and_grows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a window of a few KiB, nearly every piece flushes, moves or grows it."""
    monkeypatch.setattr(_writer_sink, "_WINDOW_START", 256)
    monkeypatch.setattr(_writer_sink, "WINDOW_BYTES", 4096)
    monkeypatch.setattr(_writer_sink, "_FLUSH_BYTES", 2048)
    for seed in range(6):
        ops, size = _ops(100 + seed, big=False)
        memory = io.BytesIO()
        _run(Sink(memory), ops, size)
        _assert_same_in_memory(memory.getvalue(), _expected(ops, size))


def test_lookup3_in_agrees_with_lookup3() -> None:
    rng = np.random.default_rng(0)
    buf = rng.integers(0, 256, 5000, dtype=np.uint8)
    offsets = rng.integers(0, 4000, 300).tolist()
    lengths = rng.integers(0, 100, 300).tolist()
    got = lookup3_in(buf, offsets, lengths).tolist()
    assert got == [lookup3(buf[o : o + n].tobytes()) for o, n in zip(offsets, lengths)]
    assert got == lookup3_many([buf[o : o + n].tobytes() for o, n in zip(offsets, lengths)])


@pytest.mark.parametrize("checksummed", [False, True])
def test_a_piece_across_the_window_start(checksummed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A piece larger than the window goes out on its own and the window starts after it; a later
    piece over its end (below the window, then in it) is split, its checksum taken whole first;
    a payload below the window goes out directly."""
    monkeypatch.setattr(_writer_sink, "_WINDOW_START", 64)
    monkeypatch.setattr(_writer_sink, "WINDOW_BYTES", 256)
    monkeypatch.setattr(_writer_sink, "_FLUSH_BYTES", 128)
    expected = bytearray(1000)
    memory = io.BytesIO()
    sink = Sink(memory)
    big = bytes(range(256)) * 2  # 512 bytes: larger than the window
    sink.put(0, big)
    expected[0:512] = big
    sink.put(600, b"after")
    expected[600:605] = b"after"
    across = b"A" * 20 + b"B" * 20  # 500..540: below the window's start (512), then in it
    if checksummed:
        sink.put_checksummed(500, across)
        across += lookup3(across).to_bytes(4, "little")
    else:
        sink.put(500, across)
    expected[500 : 500 + len(across)] = across
    sink.put_large(100, b"payload")  # below the window
    expected[100:107] = b"payload"
    sink.finish(1000)
    _assert_same_in_memory(memory.getvalue(), bytes(expected))
