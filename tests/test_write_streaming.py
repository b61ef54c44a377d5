"""Writing never holds a second full copy of an array: C-ordered input is transposed to Julia's
column-major order block by block, F-ordered input is written straight from its memory, and
compression works chunk by chunk. Measured with tracemalloc (numpy reports its buffers to it)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest

import treexchange
from treexchange import NamedTuple
from treexchange._jld2._writer_arrays import column_major_pieces
from treexchange._jld2._writer_sink import PIPE_BLOCK_BYTES, PIPE_BUFFERS

MB = 1 << 20


def peak_while(fn: object) -> int:
    tracemalloc.start()
    try:
        fn()  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def big() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((2048, 4096), dtype=np.float32)  # 32 MiB, C-ordered


def test_c_ordered_input_is_streamed(tmp_path: Path, big: np.ndarray) -> None:
    path = tmp_path / "c.jld2"
    peak = peak_while(lambda: treexchange.save(path, model_state=NamedTuple(w=big)))
    # The writer's pool of transpose buffers, and nothing the size of the array.
    assert peak < PIPE_BUFFERS * PIPE_BLOCK_BYTES + 4 * MB, (
        f"peak {peak / MB:.1f} MiB for a {big.nbytes / MB:.0f} MiB array"
    )
    with h5py.File(path, "r") as f:
        w = f[f["model_state"][()]["w"]]
        assert w.shape == (4096, 2048)
        assert np.array_equal(w[()].T, big)


def test_f_ordered_input_is_written_without_copy(tmp_path: Path, big: np.ndarray) -> None:
    fbig = np.asfortranarray(big)
    path = tmp_path / "f.jld2"
    peak = peak_while(lambda: treexchange.save(path, w=fbig))
    assert peak < 2 * MB
    assert np.array_equal(treexchange.load(path, "w"), big)


def test_compression_is_chunked(tmp_path: Path, big: np.ndarray) -> None:
    path = tmp_path / "z.jld2"
    peak = peak_while(lambda: treexchange.save(path, w=big, compress=True))
    assert peak < 12 * MB
    with h5py.File(path, "r") as f:
        assert f["w"].chunks is not None and np.array_equal(f["w"][()].T, big)


def test_pieces_cover_every_layout() -> None:
    a = np.arange(3 * 4 * 5, dtype=np.int32).reshape(3, 4, 5)
    for arr in (a, np.asfortranarray(a), a[:, ::2, 1:], a.transpose(2, 0, 1), a.astype(">i4")):
        for limit in (4, 40, 1 << 20):
            raw = b"".join(bytes(p) for p in column_major_pieces(arr, limit))
            assert raw == np.asarray(arr, dtype="<i4").tobytes(order="F")
