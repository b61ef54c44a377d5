"""Compressed arrays: shuffle + deflate (or zstd) in layouts libhdf5 2.x and JLD2.jl both read.

One chunk: JLD2's own single-chunk layout (v4) with libhdf5's dimension-size width; several
chunks: layout v3 with a v1 B-tree (multi-level past 64 chunks). h5py (libhdf5 2.0) must read
every array back bit for bit; so must treexchange's reader.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import h5py
import ml_dtypes
import numpy as np
import pytest

import treexchange
from treexchange import NamedTuple, values_equal
from treexchange._hdf5 import HDF5File
from treexchange._jld2._writer import JLD2Writer
from treexchange._jld2._writer_arrays import Compression, plan_chunk

try:
    import hdf5plugin  # noqa: F401  (registers the zstd filter with h5py)

    HAVE_ZSTD_PLUGIN = h5py.h5z.filter_avail(32015)
except ImportError:  # pragma: no cover - hdf5plugin is in the dev extra
    HAVE_ZSTD_PLUGIN = False


def write(values: dict[str, Any], compression: Compression) -> bytes:
    buf = io.BytesIO()
    w = JLD2Writer(buf, compress=compression)
    for k, v in values.items():
        w.write(k, v)
    w.close()
    return buf.getvalue()


def h5_julia(ds: h5py.Dataset) -> np.ndarray:
    data = ds[()]
    if data.dtype.names == ("re", "im"):
        data = data["re"] + 1j * data["im"]
    return data.T


def layout_of(raw: bytes, name: str) -> Any:
    with HDF5File(raw) as h5:
        return h5.object(h5.object(h5.root_address).links()[name]).layout


VALUES = {
    "matrix": np.arange(300 * 7, dtype=np.float32).reshape(300, 7),
    "cube": np.arange(5 * 6 * 7, dtype=np.int16).reshape(5, 6, 7) % 13,
    "bool": (np.arange(50) % 3 == 0).reshape(5, 10),
    "complex": (np.arange(40) * (1 + 2j)).astype(np.complex128).reshape(8, 5),
    "float16": np.linspace(-1, 1, 33, dtype=np.float16),
    "zero_d": np.array(7.25),
    "strided": np.arange(400.0).reshape(20, 20)[::3, ::2],
}

METHODS = [Compression("deflate", 5, chunk_bytes=200), Compression("zstd", 3, chunk_bytes=200)]


@pytest.mark.parametrize("compression", METHODS, ids=["deflate", "zstd"])
def test_h5py_reads_compressed_arrays_bit_exactly(compression: Compression) -> None:
    if compression.method == "zstd" and not HAVE_ZSTD_PLUGIN:
        pytest.skip("hdf5plugin's zstd filter is not available")
    raw = write(VALUES, compression)
    with h5py.File(io.BytesIO(raw), "r") as f:
        for name, value in VALUES.items():
            ds = f[name]
            assert ds.chunks is not None, name
            assert ds.shuffle
            if compression.method == "deflate":
                assert ds.compression == "gzip"
            else:
                assert 32015 in ds._filters or "32015" in ds._filters
            got = h5_julia(ds)
            if value.dtype == bool:
                got = got.astype(bool)
            if value.ndim == 0:
                assert got.reshape(()) == value
            else:
                assert got.shape == value.shape and np.array_equal(got, value), name
    back = treexchange.load(raw)
    for name, value in VALUES.items():
        assert values_equal(back[name], value), name


def test_single_chunk_uses_jld2_layout_with_libhdf5_width() -> None:
    small = np.arange(1000, dtype=np.float64).reshape(10, 100)  # 8000 bytes: one chunk
    wide = np.zeros(70_000, dtype=np.uint8)  # one chunk, but dims need a 3-byte width
    raw = write({"small": small, "wide": wide}, Compression("deflate", 5))
    lay = layout_of(raw, "small")
    assert (lay.kind, lay.version, lay.index_type) == ("chunked", 4, 1)
    assert lay.chunk_dims == (100, 10, 8)
    # JLD2 reads only widths of 1, 2, 4, 8 bytes: a 3-byte width falls back to the B-tree layout.
    lay = layout_of(raw, "wide")
    assert (lay.kind, lay.version) == ("chunked", 3)
    with h5py.File(io.BytesIO(raw), "r") as f:
        assert np.array_equal(f["small"][()].T, small)
        assert np.array_equal(f["wide"][()], wide)
        assert f["small"].chunks == (100, 10)


@pytest.mark.parametrize("nchunks", [3, 64, 65, 700, 4097])
def test_btree_levels(nchunks: int) -> None:
    # 8-byte chunks of one Int64 each: ``nchunks`` chunks, so 1, 2 or 3 B-tree levels.
    value = np.arange(nchunks, dtype=np.int64) * 7
    raw = write({"v": value}, Compression("deflate", 1, chunk_bytes=8))
    lay = layout_of(raw, "v")
    assert (lay.kind, lay.version, lay.chunk_dims) == ("chunked", 3, (1, 8))
    with h5py.File(io.BytesIO(raw), "r") as f:
        ds = f["v"]
        assert np.array_equal(ds[()], value)
        assert ds[nchunks // 2] == value[nchunks // 2]  # a point lookup walks the B-tree keys
        assert ds[-3:].tolist() == value[-3:].tolist()
    assert np.array_equal(treexchange.load(raw, "v"), value)


def test_btree_matches_libhdf5_for_the_same_chunks(tmp_path: Path) -> None:
    # libhdf5 writes a 300x7 float32 array with (100, 7) chunks (HDF5 order) as a one-node
    # B-tree; ours must have the same keys (chunk offsets; the final key past the last chunk).
    value = np.arange(300 * 7, dtype=np.float32).reshape(7, 300)  # Julia 7x300 = HDF5 (300, 7)
    raw = write({"x": value}, Compression("deflate", 4, chunk_bytes=7 * 100 * 4))
    ours = layout_of(raw, "x")
    ref = tmp_path / "ref.h5"
    with h5py.File(ref, "w") as f:
        f.create_dataset("x", data=value.T, chunks=(100, 7), compression="gzip", shuffle=True)
    with HDF5File(str(ref)) as h5:
        theirs = h5.object(h5.object(h5.root_address).links()["x"]).layout
        ref_keys = _btree_keys(h5.buffer, theirs.index_address, 3)
    with HDF5File(raw) as h5:
        our_keys = _btree_keys(h5.buffer, ours.index_address, 3)
    assert ours.chunk_dims == theirs.chunk_dims == (100, 7, 4)
    assert [k[2] for k in our_keys] == [k[2] for k in ref_keys]


def _btree_keys(buf: Any, offset: int, nd1: int) -> list[tuple[int, int, tuple[int, ...]]]:
    raw = bytes(buf[offset : offset + 24 + 65 * (8 + 8 * nd1) + 64 * 8])
    assert raw[:4] == b"TREE" and raw[4] == 1 and raw[5] == 0
    n = int.from_bytes(raw[6:8], "little")
    keys = []
    pos = 24
    for i in range(n + 1):
        size = int.from_bytes(raw[pos : pos + 4], "little")
        mask = int.from_bytes(raw[pos + 4 : pos + 8], "little")
        offs = tuple(int.from_bytes(raw[pos + 8 + 8 * j : pos + 16 + 8 * j], "little") for j in range(nd1))
        keys.append((size, mask, offs))
        pos += 8 + 8 * nd1 + (8 if i < n else 0)
    return keys


def test_nested_arrays_are_compressed_too(tmp_path: Path) -> None:
    state = NamedTuple(
        layers=(NamedTuple(weight=np.zeros((64, 32), np.float32), bias=np.zeros(64, np.float32)),)
    )
    path = tmp_path / "c.jld2"
    treexchange.save(path, model_state=state, compress=True)
    with h5py.File(path, "r") as f:
        row = f["model_state"][()]["layers"]["1"]
        w = f[row["weight"]]
        assert w.compression == "gzip" and w.shuffle and w.compression_opts == 5
        assert w.id.get_storage_size() < 1000  # zeros compress
    assert values_equal(treexchange.load(path, "model_state"), state)


def test_bfloat16_and_struct_arrays_compress(tmp_path: Path) -> None:
    bf = np.arange(100, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(10, 10)
    path = tmp_path / "c.jld2"
    treexchange.save(path, bf=bf, compress="zstd")
    assert values_equal(treexchange.load(path, "bf"), bf)
    if HAVE_ZSTD_PLUGIN:
        with h5py.File(path, "r") as f:
            assert np.array_equal(f["bf"][()].view(ml_dtypes.bfloat16).T, bf)


def test_plan_chunk_spans_leading_dims() -> None:
    assert plan_chunk((4, 5, 6), 8, target=4 * 5 * 8) == (4, 5, 1)
    assert plan_chunk((4, 5, 6), 8, target=4 * 5 * 8 * 3) == (4, 5, 3)
    assert plan_chunk((1000,), 4, target=64) == (16,)
    assert plan_chunk((3, 3), 8, target=1) == (1, 1)
