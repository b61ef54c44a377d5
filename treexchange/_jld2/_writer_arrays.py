"""Array payloads: Julia column-major bytes in bounded pieces, and compressed chunks.

JLD2 stores an ``Array`` as its column-major element bytes (little endian); numpy arrays in Julia
shape are usually C-ordered, so the bytes are produced block by block along the slowest Julia
dimension. No piece is larger than :data:`BLOCK_BYTES` (plus one slab), so writing never holds a
second full copy of an array. F-ordered input (what the reader returns) is written zero-copy.

Compressed arrays are cut into chunks that span whole leading Julia dimensions and are about
:data:`CHUNK_BYTES` large, so each chunk is a contiguous run of the column-major stream and
compression memory stays bounded. An array that fits in one chunk (<= 1 MiB) is stored as JLD2
stores every compressed array: layout **version 4 with a single-chunk index**, but with the
dimension-size width libhdf5 computes (JLD2 writes 8, which libhdf5 >= 2.0 rejects). Larger
arrays, and single chunks whose width would be 3, 5, 6 or 7 bytes (JLD2 reads only 1, 2, 4 or 8),
use layout **version 3 indexed by a version-1 B-tree**, the layout libhdf5 itself writes by
default; both libhdf5 2.x and JLD2.jl 0.6 read it (``read_v1btree_dataset_chunks`` in JLD2's
src/datasets.jl). See docs/writing.md.

"Never copied whole" holds for numpy and jax input. Arrays whose elements are Python objects (a
``JuliaArray`` or ``list`` of structs, Int128 ...) are encoded into one buffer first: their
objects already take several times the encoded size.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from .._errors import UnsupportedError

BLOCK_BYTES = 8 << 20
"""Largest piece of column-major bytes produced at once when transposing C-ordered input."""

CHUNK_BYTES = 1 << 20
"""Target (uncompressed) chunk size for compressed arrays (libhdf5's default chunk cache size)."""

DEFLATE_ID = 1
SHUFFLE_ID = 2
ZSTD_ID = 32015


def little_endian(dtype: np.dtype) -> np.dtype:
    """``dtype`` with little-endian byte order (the order JLD2 writes)."""
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and np.little_endian is False):
        return dtype.newbyteorder("<")
    return dtype


def _as_bytes(a: np.ndarray) -> memoryview:
    """The raw bytes of a C-contiguous array, for any dtype (bfloat16 and void included)."""
    flat = a.reshape(-1)
    return flat.view(np.uint8).data


def column_major_pieces(arr: np.ndarray, max_bytes: int = BLOCK_BYTES) -> Iterator[memoryview]:
    """Yield the bytes of ``arr`` (Julia shape) in column-major order, little endian, in pieces.

    Example:
        >>> a = np.arange(6, dtype=np.int16).reshape(2, 3)   # C-ordered, Julia shape 2x3
        >>> b"".join(column_major_pieces(a, max_bytes=4)) == a.tobytes(order="F")
        True
    """
    dtype = little_endian(arr.dtype)
    if arr.ndim == 0:
        yield _as_bytes(np.ascontiguousarray(arr.reshape(1), dtype=dtype))
        return
    if arr.size == 0:
        return
    if arr.dtype == dtype and arr.flags.f_contiguous:
        raw = _as_bytes(arr.T)  # arr.T is C-contiguous; its memory is arr's column-major order
        for start in range(0, len(raw), max_bytes):
            yield raw[start : start + max_bytes]
        return
    slab = arr[..., 0].nbytes if arr.ndim > 1 else arr.itemsize
    if arr.ndim > 1 and slab > max_bytes:
        for j in range(arr.shape[-1]):
            yield from column_major_pieces(arr[..., j], max_bytes)
        return
    step = max(1, max_bytes // max(slab, 1))
    for j in range(0, arr.shape[-1], step):
        block = np.asfortranarray(arr[..., j : j + step], dtype=dtype)
        yield _as_bytes(block.T)
        del block  # drop it before the next block is made: one block alive at a time


@dataclass(frozen=True)
class Compression:
    """A compression choice: ``"deflate"`` (shuffle + zlib) or ``"zstd"`` (shuffle + zstd), and
    the target uncompressed chunk size in bytes."""

    method: str
    level: int
    chunk_bytes: int = CHUNK_BYTES

    def __post_init__(self) -> None:
        if self.method not in ("deflate", "zstd"):
            raise ValueError(f"unknown compression method {self.method!r}")
        if self.chunk_bytes < 1:
            raise ValueError("chunk_bytes must be positive")

    @classmethod
    def from_option(cls, option: bool | str | None) -> Compression | None:
        """Normalize the ``compress=`` option of :func:`treexchange.save`.

        Example:
            >>> Compression.from_option(True)
            Compression(method='deflate', level=5, chunk_bytes=1048576)
            >>> Compression.from_option(False) is None
            True
        """
        if option is None or option is False:
            return None
        if option is True or option == "deflate":
            return cls("deflate", 5)
        if option == "zstd":
            return cls("zstd", 3)
        raise ValueError(f"compress must be False, True, 'deflate' or 'zstd', not {option!r}")

    def filters(self, itemsize: int) -> list[tuple[int, str, tuple[int, ...]]]:
        """The filter pipeline entries (id, name, client values) in application order."""
        if self.method == "deflate":
            return [(SHUFFLE_ID, "", (itemsize,)), (DEFLATE_ID, "", (self.level,))]
        return [(SHUFFLE_ID, "", (itemsize,)), (ZSTD_ID, "ZSTD", (self.level,))]

    def compressor(self) -> Callable[[bytes], bytes]:
        if self.method == "deflate":
            level = self.level
            return lambda data: zlib.compress(data, level)
        try:
            import zstandard
        except ImportError as exc:  # pragma: no cover - zstandard is a dependency of the extra
            raise UnsupportedError(
                "zstd compression needs the 'zstandard' package (pip install treexchange[compression])"
            ) from exc
        cctx = zstandard.ZstdCompressor(level=self.level, write_content_size=True)
        return cctx.compress


def plan_chunk(shape: tuple[int, ...], itemsize: int, target: int = CHUNK_BYTES) -> tuple[int, ...]:
    """Chunk dims (Julia order): leading dimensions whole while they fit in ``target`` bytes,
    then a slice of the next dimension, and 1 along the slower ones.

    Example:
        >>> plan_chunk((1000, 1000), 4, target=1 << 20)
        (1000, 262)
        >>> plan_chunk((10,), 8)
        (10,)
    """
    chunk = [1] * len(shape)
    acc = itemsize
    for i, d in enumerate(shape):
        if acc * d <= target:
            chunk[i] = d
            acc *= d
        else:
            chunk[i] = max(1, min(d, target // acc))
            break
    return tuple(chunk)


def shuffle(data: bytes | memoryview, itemsize: int) -> bytes:
    """HDF5's shuffle filter: byte ``b`` of every element, for b = 0..itemsize-1."""
    if itemsize <= 1:
        return bytes(data)
    a = np.frombuffer(data, dtype=np.uint8).reshape(-1, itemsize)
    return a.T.tobytes()


@dataclass(frozen=True)
class Chunk:
    """One stored chunk: compressed bytes and its offset (elements, HDF5 order + element dim 0)."""

    data: bytes
    offsets: tuple[int, ...]


def compressed_chunks(arr: np.ndarray, chunk: tuple[int, ...], compression: Compression) -> Iterator[Chunk]:
    """Compress ``arr`` (Julia shape; 0-d treated as shape (1,)) chunk by chunk, in HDF5 order.

    Edge chunks are zero-padded to the full chunk size, as HDF5 stores them.
    """
    if arr.ndim == 0:
        arr = arr.reshape(1)
    dtype = little_endian(arr.dtype)
    itemsize = dtype.itemsize
    compress = compression.compressor()
    full = int(np.prod(chunk)) * itemsize
    grid = [range(0, n, c) for n, c in zip(arr.shape, chunk)]
    # HDF5 visits chunks in C order of its own (reversed) dims: the last Julia dim is slowest.
    for starts_rev in itertools.product(*reversed(grid)):
        starts = starts_rev[::-1]
        index = tuple(slice(s, min(s + c, n)) for s, c, n in zip(starts, chunk, arr.shape))
        block = np.asfortranarray(arr[index], dtype=dtype)
        raw = bytes(_as_bytes(block.T))
        if len(raw) < full:
            raw += bytes(full - len(raw))
        yield Chunk(compress(shuffle(raw, itemsize)), (*starts_rev, 0))
