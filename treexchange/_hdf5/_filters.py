"""Undoing HDF5 filter pipelines on chunk bytes, with bounded output.

Filters are applied in reverse pipeline order, skipping those whose bit is set in the chunk's
filter mask. Every decompressor is told the most it may produce (the chunk's size plus room for
checksums still to strip), so a hostile stream cannot inflate beyond what the dataset needs.

Optional codecs are imported on first use; a missing package raises
:class:`~treexchange.UnsupportedError` naming the ``compression`` extra.
"""

from __future__ import annotations

import bz2
import io
import zlib
from collections.abc import Sequence

import numpy as np

from .._errors import FormatError, UnsupportedError
from ._model import Filter

DEFLATE = 1
SHUFFLE = 2
FLETCHER32 = 3
BZIP2 = 307
LZ4 = 32004
ZSTD = 32015

_EXTRA = "install the optional codecs: the 'compression' extra (`pip install '.[compression]'` in a clone)"
_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"


def decode_chunk(
    data: bytes | memoryview,
    filters: Sequence[Filter],
    mask: int,
    expected: int,
    *,
    offset: int | None = None,
) -> bytes | memoryview:
    """Undo ``filters`` (reverse order, honouring ``mask``) on one stored chunk.

    ``expected`` is the decoded chunk size in bytes; no stage may produce more than that plus
    4 bytes per Fletcher32 stage still to undo.

    Example:
        >>> import zlib
        >>> raw = bytes(range(8))
        >>> bytes(decode_chunk(zlib.compress(raw), [Filter(1, "deflate", 0, (4,))], 0, 8))
        b'\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\x07'
    """
    active = [(i, f) for i, f in enumerate(filters) if not (mask >> i) & 1]
    out: bytes | memoryview = data
    for pos in range(len(active) - 1, -1, -1):
        _, flt = active[pos]
        slack = 4 * sum(1 for _, g in active[:pos] if g.id == FLETCHER32)
        bound = expected + slack
        try:
            out = _undo(flt, out, bound, offset)
        except (FormatError, UnsupportedError):
            raise
        except Exception as exc:  # codec libraries raise their own error types
            raise FormatError(
                f"{flt.name or flt.id} filter failed to decode a chunk ({type(exc).__name__}: {exc})",
                offset=offset,
            ) from exc
        if len(out) > bound:
            raise FormatError(
                f"{flt.name or flt.id} filter produced {len(out)} bytes, at most {bound} expected",
                offset=offset,
            )
    return out


def _undo(flt: Filter, data: bytes | memoryview, bound: int, offset: int | None) -> bytes | memoryview:
    fid = flt.id
    if fid == DEFLATE:
        d = zlib.decompressobj()
        out = d.decompress(data, bound + 1)
        return out
    if fid == SHUFFLE:
        size = flt.client_data[0] if flt.client_data else 1
        return unshuffle(data, size)
    if fid == FLETCHER32:
        return _check_fletcher32(data, offset)
    if fid == ZSTD:
        try:
            import zstandard  # zstandard is optional (the compression extra)
        except ImportError:
            raise UnsupportedError(
                f"zstd-compressed data needs the 'zstandard' package: {_EXTRA}", offset=offset
            ) from None
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bytes(data)), read_across_frames=True)
        parts = []
        got = 0
        while got <= bound:  # read() may return less than asked: loop, never past bound + 1
            piece = reader.read(bound + 1 - got)
            if not piece:
                break
            parts.append(piece)
            got += len(piece)
        return b"".join(parts)
    if fid == BZIP2:
        return bz2.BZ2Decompressor().decompress(bytes(data), bound + 1)
    if fid == LZ4:
        return _lz4(data, bound, offset)
    raise UnsupportedError(f"HDF5 filter {fid} ({flt.name or 'unnamed'}) is not supported", offset=offset)


def unshuffle(data: bytes | memoryview, size: int) -> bytes | memoryview:
    """Invert the HDF5 shuffle filter (bytes grouped by significance) for ``size``-byte elements.

    Example:
        >>> bytes(unshuffle(bytes([1, 3, 2, 4]), 2))
        b'\\x01\\x02\\x03\\x04'
    """
    n = len(data) // size if size > 1 else 0
    if n <= 1:
        return data
    arr = np.frombuffer(data, dtype=np.uint8)
    body = arr[: n * size].reshape(size, n).T.reshape(-1)
    if n * size == len(arr):
        return body.tobytes()
    return body.tobytes() + arr[n * size :].tobytes()


def fletcher32(data: bytes | memoryview) -> int:
    """HDF5's Fletcher-32 of ``data`` (16-bit big-endian words; an odd last byte is the high byte).

    HDF5 reduces modulo 65535 lazily, so a non-zero sum that is a multiple of 65535 comes out as
    0xFFFF, and only all-zero input gives 0.

    Example:
        >>> hex(fletcher32(b"abcde"))
        '0x4ff029c7'
    """
    raw = bytes(data)
    if len(raw) % 2:
        raw += b"\x00"
    words = np.frombuffer(raw, dtype=">u2").astype(np.uint64)
    n = len(words)
    if n == 0 or not words.any():
        return 0
    # sum2 = sum over i of w_i * (n - i); computed in blocks to stay inside uint64.
    s1 = 0
    s2 = 0
    block = 1 << 16
    for start in range(0, n, block):
        w = words[start : start + block]
        weights = np.arange(n - start, n - start - len(w), -1, dtype=np.uint64) % 65535
        s1 += int(w.sum())
        s2 += int((w * weights % 65535).sum())
    r1 = s1 % 65535 or 65535
    r2 = s2 % 65535 or 65535
    return (r2 << 16) | r1


def _check_fletcher32(data: bytes | memoryview, offset: int | None) -> bytes | memoryview:
    if len(data) < 4:
        raise FormatError("chunk too short for its Fletcher32 checksum", offset=offset)
    body = data[:-4]
    stored = bytes(data[-4:])
    value = fletcher32(body)
    # HDF5 before 1.6.3 stored the checksum with its bytes swapped; libhdf5 accepts both.
    if stored not in (value.to_bytes(4, "little"), value.to_bytes(4, "big")):
        raise FormatError("Fletcher32 checksum mismatch in a chunk", offset=offset)
    return body


def _lz4(data: bytes | memoryview, bound: int, offset: int | None) -> bytes:
    try:
        import lz4.block  # lz4 is optional (the compression extra)
        import lz4.frame
    except ImportError:
        raise UnsupportedError(
            f"LZ4-compressed data needs the 'lz4' package: {_EXTRA}", offset=offset
        ) from None
    raw = bytes(data)
    if raw[:4] == _LZ4_FRAME_MAGIC:
        # JLD2 <= 0.5 wrote LZ4 *frames* under the HDF5 LZ4 filter id.
        d = lz4.frame.LZ4FrameDecompressor()
        return bytes(d.decompress(raw, max_length=bound + 1))
    # HDF5 LZ4 framing: u64 BE total size, u32 BE block size, then per block u32 BE compressed
    # size + data (stored raw when compression did not help).
    if len(raw) < 12:
        raise FormatError("LZ4 chunk shorter than its header", offset=offset)
    total = int.from_bytes(raw[:8], "big")
    block = int.from_bytes(raw[8:12], "big")
    if total > bound:
        raise FormatError(f"LZ4 chunk claims {total} bytes, at most {bound} expected", offset=offset)
    if block == 0 and total:
        raise FormatError("LZ4 chunk with zero block size", offset=offset)
    out = bytearray()
    pos = 12
    while len(out) < total:
        if pos + 4 > len(raw):
            raise FormatError("truncated LZ4 block header", offset=offset)
        csize = int.from_bytes(raw[pos : pos + 4], "big")
        pos += 4
        want = min(block, total - len(out))
        if csize > len(raw) - pos:
            raise FormatError("truncated LZ4 block", offset=offset)
        piece = raw[pos : pos + csize]
        pos += csize
        if csize == want:
            out += piece
        else:
            out += lz4.block.decompress(piece, uncompressed_size=want)
    return bytes(out)
