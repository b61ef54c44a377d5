"""The save pipeline for large arrays: the cache-blocked transpose of C-ordered input into reusable
buffers, and the writer thread that writes them (treexchange/_jld2/_writer_sink.py)."""

from __future__ import annotations

import gc
import io
import itertools
import os
from pathlib import Path

import h5py
import ml_dtypes
import numpy as np
import pytest

import treexchange
from treexchange import NamedTuple
from treexchange._jld2._writer_arrays import (
    TILE_ELEMENTS,
    column_major_bytes,
    column_major_pieces,
    transpose_into,
)
from treexchange._jld2._writer_sink import PIPE_BLOCK_BYTES, Sink

DTYPES = [
    np.bool_,
    np.int8,
    np.uint8,
    np.int16,
    np.uint16,
    np.int32,
    np.uint32,
    np.int64,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
    ml_dtypes.bfloat16,
    np.dtype("V3"),
    np.dtype(">f4"),
    np.dtype(">i8"),
]

# Small, odd, and larger than one tile (so the tiling loops run, with ragged edge tiles).
SHAPES = [
    (7,),
    (1, 1),
    (3, 5),
    (257, 131),
    (1, 70001),
    (70001, 1),
    (5, 3, 4),
    (67, 9, 53),
    (2, 3, 4, 5),
    (31, 3, 2, 129),
    (3, 2, 2, 3, 2),
]


def _random(shape: tuple[int, ...], dtype: np.dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(dtype).itemsize, dtype=np.uint8)
    if np.dtype(dtype) == np.bool_:
        raw = raw & 1
    return raw.view(dtype).reshape(shape)


def _expected(arr: np.ndarray) -> bytes:
    le = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
    return np.asfortranarray(arr, dtype=le).tobytes(order="F")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_transpose_into_matches_asfortranarray(dtype: np.dtype) -> None:
    for shape in SHAPES:
        arr = _random(shape, np.dtype(dtype))
        out = np.empty(shape[::-1], arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype)
        transpose_into(arr, out)
        assert out.tobytes() == _expected(arr), shape


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_small_arrays_in_one_piece(dtype: np.dtype) -> None:
    for shape in [(), *SHAPES]:
        arr = _random(shape, np.dtype(dtype), seed=2)
        assert column_major_bytes(arr) == (
            _expected(arr) if shape else arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        )
        assert column_major_bytes(arr) == b"".join(bytes(p) for p in column_major_pieces(arr))


@pytest.mark.parametrize(
    "dtype", [np.float32, np.int16, np.complex128, ml_dtypes.bfloat16, np.dtype(">f8")], ids=str
)
def test_pieces_with_a_reused_dirty_buffer(dtype: np.dtype) -> None:
    """Pieces written into one reused (never cleared) buffer join to the column-major bytes,
    whatever the block size: slabs smaller and larger than a block, strided views."""
    pool = np.full(1 << 20, 0xAB, np.uint8)

    def take(n: int) -> np.ndarray:
        assert n <= len(pool)
        return pool

    for shape in SHAPES:
        base = _random(shape, np.dtype(dtype), seed=1)
        for arr in (base, base[::-1], base[..., ::2] if base.shape[-1] > 1 else base):
            for limit in (64, 4096, 1 << 20):
                got = b"".join(bytes(p) for p in column_major_pieces(arr, limit, take))
                assert got == _expected(arr), (shape, limit)


def test_tiles_cover_a_large_array() -> None:
    arr = _random((1031, 517), np.dtype(np.float32))
    assert arr.size > 8 * TILE_ELEMENTS
    out = np.empty((517, 1031), np.float32)
    transpose_into(arr, out)
    assert out.tobytes() == np.ascontiguousarray(arr.T).tobytes()  # bit patterns: NaNs included


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_staged_tiles_of_matrices(dtype: np.dtype) -> None:
    """Matrices larger than a tile go through the staged transpose (or, for wide elements at
    odd widths, the direct one): ragged edge tiles, power-of-two widths (rows 1 KiB or more
    apart), reversed and column-strided views, byte-swapped input converted on the way."""
    for shape in [(600, 301), (300, 1024), (257, 2048)]:
        base = _random(shape, np.dtype(dtype), seed=4)
        for arr in (base, base[::-1], base[:, ::2], base[::-1, ::-3]):
            le = arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype
            out = np.empty(arr.shape[::-1], le)
            transpose_into(arr, out)
            assert out.tobytes() == _expected(arr), (shape, arr.strides)


def test_sink_pipeline_writes_the_same_bytes_as_memory_sink(tmp_path: Path) -> None:
    arrays = [
        _random((513, 2049), np.dtype(np.float32)),  # several pipeline blocks
        _random((3, 5), np.dtype(np.int8)),
        np.asfortranarray(_random((700, 900), np.dtype(np.float64))),  # zero-copy pieces
        _random((4, 1 << 20), np.dtype(np.int16)),  # a slab per column, many columns per block
    ]
    assert arrays[0].nbytes > PIPE_BLOCK_BYTES
    memory = io.BytesIO()
    mem_sink = Sink(memory)
    path = tmp_path / "sink.bin"
    with open(path, "w+b") as f:
        file_sink = Sink(f)
        pos = 16
        for arr in arrays:
            file_sink.put(pos - 16, b"header%10d" % pos)
            mem_sink.put(pos - 16, b"header%10d" % pos)
            n = file_sink.put_array(pos, arr)
            assert mem_sink.put_array(pos, arr) == n == arr.nbytes
            pos += n + 16
        # (an in-memory file is not extended by truncate: end at the last byte written)
        file_sink.finish(pos - 16)
        mem_sink.finish(pos - 16)
    assert path.read_bytes() == memory.getvalue()


def test_write_errors_surface_at_finish(tmp_path: Path) -> None:
    path = tmp_path / "ro.bin"
    path.write_bytes(b"")
    with open(path, "rb") as f:  # a descriptor pwrite cannot write to
        sink = Sink(f)  # type: ignore[arg-type]
        with pytest.raises(OSError):
            sink.put_array(0, _random((600, 4000), np.dtype(np.float32)))
            sink.finish(600 * 4000 * 4)


def test_an_abandoned_sink_stops_its_thread(tmp_path: Path) -> None:
    with open(tmp_path / "x.bin", "w+b") as f:
        sink = Sink(f)
        sink.put_array(0, _random((100, 100), np.dtype(np.float32)))
        assert sink._pipe is not None
        thread = sink._pipe._thread
        del sink
        gc.collect()
        thread.join(timeout=10)
        assert not thread.is_alive()


@pytest.mark.parametrize("order", ["C", "F"])
def test_save_of_large_arrays_reads_back_in_h5py(tmp_path: Path, order: str) -> None:
    rng = np.random.default_rng(3)
    shapes = [(1024, 1500), (37, 41, 1031), (3, 3, 64, 129)]
    arrays = {
        f"w{i}": np.asarray(rng.standard_normal(s, dtype=np.float32), order=order)
        for i, s in enumerate(shapes)
    }
    path = tmp_path / "big.jld2"
    treexchange.save(path, model_state=NamedTuple(**arrays))
    with h5py.File(path, "r") as f:
        stored = f[f["model_state"][()]["w0"]]
        assert np.array_equal(stored[()].T, arrays["w0"])
    back = treexchange.load(path, "model_state")
    for name, arr in arrays.items():
        assert np.array_equal(back[name], arr)
    assert list(itertools.chain(back)) == list(arrays)


@pytest.mark.parametrize("real_file", [False, True])
def test_metadata_runs_and_checksums(tmp_path: Path, real_file: bool) -> None:
    """Touching pieces, overlapping pieces (the later put wins), separate runs, and pieces
    whose lookup3 checksum the sink appends at flush time."""
    from treexchange._hdf5._lookup3 import lookup3

    expected = bytearray(200)

    def put(sink: Sink, offset: int, data: bytes) -> None:
        sink.put(offset, data)
        expected[offset : offset + len(data)] = data

    target = open(tmp_path / "m.bin", "w+b") if real_file else io.BytesIO()
    with target as f:
        sink = Sink(f)
        put(sink, 0, b"aaaa")
        put(sink, 4, b"bbbb")  # touching
        put(sink, 2, b"XY")  # overlapping, later: wins
        put(sink, 50, b"cccc")  # a separate run
        headers = [b"OHDR" + bytes([i]) * (i + 3) for i in range(5)]
        pos = 100
        for h in headers:
            sink.put_checksummed(pos, h)
            expected[pos : pos + len(h) + 4] = h + lookup3(h).to_bytes(4, "little")
            pos += len(h) + 4
        sink.finish(pos)
        f.seek(0)
        got = f.read()
    assert got == bytes(expected[:pos])


def _sink_bytes(path: Path, arrays: list[np.ndarray], start: int = 5) -> bytes:
    """Write ``arrays`` one after another from the unaligned offset ``start`` through a Sink."""
    with open(path, "w+b") as f:
        sink = Sink(f)
        pos = start
        sink.put(0, b"head!")
        for arr in arrays:
            pos += sink.put_array(pos, arr)
            sink.put(pos, b"gap")
            pos += 3
        sink.finish(pos)
    return path.read_bytes()


# Blocks of several MiB at unaligned offsets (edges written through the page cache), an array
# smaller than the direct-write minimum, and F-ordered input (never direct: the caller's memory).
_DIRECT_ARRAYS = [
    _random((1031, 2053), np.dtype(np.float32)),
    _random((40, 300), np.dtype(np.int16)),
    np.asfortranarray(_random((700, 900), np.dtype(np.float64))),
    _random((3, 5, 1 << 18), np.dtype(np.uint8)),
]


def _expected_file(arrays: list[np.ndarray]) -> bytes:
    return b"head!" + b"".join(_expected(a) + b"gap" for a in arrays)


def test_transposed_blocks_go_direct_with_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Transposed blocks are written with O_DIRECT where the file system takes it: the file is
    byte for byte the page-cache path's."""
    from treexchange._jld2 import _writer_sink

    opened: list[int] = []
    real_open = _writer_sink._open_direct

    def recording_open(fd: int) -> int:
        opened.append(real_open(fd))
        return opened[-1]

    monkeypatch.setattr(_writer_sink, "_open_direct", recording_open)
    expected = _expected_file(_DIRECT_ARRAYS)
    assert _sink_bytes(tmp_path / "direct.bin", _DIRECT_ARRAYS) == expected
    if _writer_sink.DIRECT_WRITES:
        assert len(opened) == 1  # once per file, at its first aligned block
    monkeypatch.setattr(_writer_sink, "DIRECT_WRITES", False)
    opened.clear()
    assert _sink_bytes(tmp_path / "cached.bin", _DIRECT_ARRAYS) == expected
    assert opened == []


_PROC = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="direct writes reopen through /proc")


@_PROC
@pytest.mark.parametrize("refusal", ["open", "write"])
def test_direct_writes_fall_back_to_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refusal: str
) -> None:
    """A file system that refuses O_DIRECT at open, or fails a direct write (EBADF here, EINVAL
    on some), gets the same bytes through the page cache."""
    from treexchange._jld2 import _writer_sink

    monkeypatch.setattr(_writer_sink, "DIRECT_WRITES", True)
    calls: list[int] = []

    def refusing_open(fd: int) -> int:
        calls.append(fd)
        # a descriptor of the file that cannot be written: every direct write fails
        return -1 if refusal == "open" else os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)

    monkeypatch.setattr(_writer_sink, "_open_direct", refusing_open)
    assert _sink_bytes(tmp_path / "fallback.bin", _DIRECT_ARRAYS) == _expected_file(_DIRECT_ARRAYS)
    assert len(calls) == 1  # refused once: never asked again for this file


@_PROC
def test_direct_descriptor_needs_a_writable_one(tmp_path: Path) -> None:
    """The reopened descriptor gives no access the caller's did not have."""
    from treexchange._jld2._writer_sink import _open_direct

    path = tmp_path / "r.bin"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert _open_direct(fd) == -1
    finally:
        os.close(fd)
