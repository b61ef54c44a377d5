"""Chunked datasets: enumerate chunks from every index kind, decode them, assemble the array.

Chunk indexes: v1 B-tree (layout v3 and older), and for layout v4 single chunk (1), implicit (2),
fixed array (3), extensible array (4) and v2 B-tree (5). Each yields :class:`ChunkRecord` values
with *scaled* coordinates (chunk indices per dimension). Enumeration is driven by what the index
holds, never by the dataspace alone, so a lying dataspace cannot make us loop over billions of
absent chunks.

Linear chunk indices (implicit, fixed and extensible arrays) follow libhdf5: row-major over the
number of chunks along each *maximum* dimension; for the extensible array the unlimited
dimension is moved to the front first ("swizzled").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from .._errors import FormatError, LimitError, UnsupportedError
from ._btree1 import ChunkRecord, chunk_records
from ._btree2 import records as btree2_records
from ._cursor import Cursor
from ._filters import decode_chunk
from ._lookup3 import lookup3
from ._model import Layout

if TYPE_CHECKING:
    from ._file import HDF5File
    from ._objectheader import ObjectHeader

UNLIMITED = (1 << 64) - 1


class _Geometry:
    """Shapes of a chunked dataset: dims, chunk dims (no element dim), element size, chunk bytes."""

    def __init__(self, f: HDF5File, obj: ObjectHeader, layout: Layout) -> None:
        space, dtype = obj.dataspace, obj.datatype
        assert space is not None and dtype is not None
        self.elem = dtype.size
        self.dims = space.dims if space.dims else (1,)
        rank = len(self.dims)
        if len(layout.chunk_dims) != rank + 1:
            raise FormatError(
                f"chunked layout has {len(layout.chunk_dims)} dimensions for a rank-{rank} dataspace "
                "(expected rank + 1)",
                offset=obj.offset,
            )
        self.chunk = tuple(layout.chunk_dims[:-1])
        if any(d == 0 for d in self.chunk):
            raise FormatError("chunk dimension of size 0", offset=obj.offset)
        n = self.elem
        for d in self.chunk:
            n *= d
        self.chunk_bytes = n
        if n > f.limits.max_array_bytes:
            raise LimitError(f"chunk of {n} bytes exceeds max_array_bytes", offset=obj.offset)
        maxdims = space.maxdims or self.dims
        self.unlimited = [i for i, d in enumerate(maxdims) if d == UNLIMITED]
        self.nchunks = tuple(-(-d // c) for d, c in zip(self.dims, self.chunk))
        self.max_chunks = tuple(
            UNLIMITED if m == UNLIMITED else -(-max(m, d) // c)
            for m, d, c in zip(maxdims, self.dims, self.chunk)
        )

    def is_partial(self, coords: tuple[int, ...]) -> bool:
        return any((c + 1) * k > d for c, k, d in zip(coords, self.chunk, self.dims))


def _down(sizes: tuple[int, ...]) -> list[int]:
    """Row-major strides (in chunks) for a grid with ``sizes`` chunks per dimension."""
    down = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        down[i] = down[i + 1] * sizes[i + 1]
    return down


def _unlinear(idx: int, down: list[int], sizes: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    for i, d in enumerate(down):
        q = idx // d
        out.append(q if i == 0 else q % sizes[i])
    return tuple(out)


def iter_chunks(f: HDF5File, obj: ObjectHeader) -> Iterator[ChunkRecord]:
    """Every stored chunk of a chunked dataset (absent chunks are simply not yielded)."""
    layout = obj.layout
    assert layout is not None and layout.kind == "chunked"
    g = _Geometry(f, obj, layout)
    if layout.index_address is None:
        return
    c = f._cursor(0)
    if layout.version < 4:
        yield from chunk_records(
            c, layout.index_address, f.base, len(layout.chunk_dims), layout.chunk_dims, f.limits
        )
        return
    t = layout.index_type
    if t == 1:
        size = layout.single_chunk_filtered_size if layout.flags & 0x02 else g.chunk_bytes
        assert size is not None
        yield ChunkRecord((0,) * len(g.dims), layout.index_address, size, layout.single_chunk_filter_mask)
    elif t == 2:
        yield from _implicit(f, g, layout.index_address)
    elif t == 3:
        yield from _fixed_array(f, g, layout.index_address)
    elif t == 4:
        yield from _extensible_array(f, g, layout.index_address)
    elif t == 5:
        yield from _btree2(f, g, layout.index_address)
    else:
        raise UnsupportedError(f"chunk index type {t} is not supported", offset=obj.offset)


# --- index kinds ---------------------------------------------------------------------------------
def _implicit(f: HDF5File, g: _Geometry, start: int) -> Iterator[ChunkRecord]:
    if g.unlimited:
        raise FormatError("implicit chunk index on a dataset with unlimited dimensions", offset=start)
    total = 1
    for n in g.max_chunks:
        total *= n
    if start + total * g.chunk_bytes > f.size:
        raise FormatError("implicitly indexed chunks run past the end of the file", offset=start)
    down = _down(g.max_chunks)
    for idx in range(total):
        coords = _unlinear(idx, down, g.max_chunks)
        if all(ci < ni for ci, ni in zip(coords, g.nchunks)):
            yield ChunkRecord(coords, start + idx * g.chunk_bytes, g.chunk_bytes, 0)


def _element_decoder(f: HDF5File, client: int, elem_size: int, at: int):  # type: ignore[no-untyped-def]
    """Decode one fixed/extensible-array element: (absolute address | None, size | None, mask)."""
    osz = f.offset_size
    if client == 0:
        if elem_size != osz:
            raise FormatError(f"chunk index element of {elem_size} bytes for unfiltered chunks", offset=at)

        def plain(ec: Cursor) -> tuple[int | None, int | None, int]:
            a = ec.address()
            return (None if a is None else a + f.base), None, 0

        return plain
    if client == 1:
        size_len = elem_size - osz - 4
        if not 1 <= size_len <= 8:
            raise FormatError(f"chunk index element of {elem_size} bytes for filtered chunks", offset=at)

        def filtered(ec: Cursor) -> tuple[int | None, int | None, int]:
            a = ec.address()
            n = ec.uint(size_len)
            mask = ec.u32()
            return (None if a is None else a + f.base), n, mask

        return filtered
    raise FormatError(f"unknown chunk index client id {client}", offset=at)


def _checked(f: HDF5File, start: int, end: int, what: str) -> None:
    if f.verify_checksums:
        stored = int.from_bytes(f.buffer[end : end + 4], "little")
        if lookup3(f.buffer[start:end]) != stored:
            raise FormatError(f"{what} checksum mismatch", offset=end)


_Emit = Callable[[int, Cursor], "ChunkRecord | None"]
"""An index element at a cursor, numbered: its chunk's record, ``None`` for a chunk not written."""


def _emitted(emit: _Emit, c: Cursor, first: int, count: int) -> Iterator[ChunkRecord]:
    """The records of the ``count`` index elements at ``c``, numbered from ``first``."""
    for k in range(count):
        rec = emit(first + k, c)
        if rec is not None:
            yield rec


def _page(
    f: HDF5File, emit: _Emit, at: int, first: int, count: int, elem_size: int, what: str
) -> Iterator[ChunkRecord]:
    """The records of a page of ``count`` elements at ``at`` (its checksum follows them)."""
    end = at + count * elem_size
    pc = f._cursor(at, end + 4)
    pc.need(end + 4 - at)
    yield from _emitted(emit, pc, first, count)
    _checked(f, at, end, what)


def _array_block(f: HDF5File, at: int, signature: bytes, what: str, block_offset: int = 0) -> Cursor:
    """A cursor past the prefix of an extensible array's index, data or secondary block at
    ``at``: signature, version, client id, header address, then the block offset (data and
    secondary blocks: ``block_offset`` bytes)."""
    c = f._cursor(at)
    c.signature(signature, what)
    c.u8()  # version
    c.u8()  # client id
    c.address()  # header address
    c.skip(block_offset)
    return c


def _fixed_array(f: HDF5File, g: _Geometry, header: int) -> Iterator[ChunkRecord]:
    hc = f._cursor(header)
    hc.signature(b"FAHD", "fixed array header")
    hc.u8()  # version
    client = hc.u8()
    elem_size = hc.u8()
    page_bits = hc.u8()
    nelmts = hc.length()
    dblock = hc.address()
    _checked(f, header, hc.pos, "fixed array header")
    if dblock is None:
        return
    decode = _element_decoder(f, client, elem_size, header)
    dblock += f.base
    dc = f._cursor(dblock)
    dc.signature(b"FADB", "fixed array data block")
    dc.u8()
    if dc.u8() != client:
        raise FormatError("fixed array data block client id differs from its header", offset=dblock + 5)
    dc.address()  # header address
    page_n = 1 << page_bits if page_bits < 64 else nelmts
    if elem_size * nelmts > f.size:
        raise FormatError(f"fixed array claims {nelmts} elements, more than the file holds", offset=header)
    down = _down(g.max_chunks)

    def emit(idx: int, ec: Cursor) -> ChunkRecord | None:
        addr, size, mask = decode(ec)
        if addr is None:
            return None
        coords = _unlinear(idx, down, g.max_chunks)
        if not all(ci < ni for ci, ni in zip(coords, g.nchunks)):
            return None
        return ChunkRecord(coords, addr, g.chunk_bytes if size is None else size, mask)

    if nelmts <= page_n:
        dc.need(nelmts * elem_size)
        yield from _emitted(emit, dc, 0, nelmts)
        _checked(f, dblock, dc.pos, "fixed array data block")
        return
    npages = -(-nelmts // page_n)
    bitmap = bytes(dc.bytes((npages + 7) // 8))
    _checked(f, dblock, dc.pos, "fixed array data block")
    page_at = dc.pos + 4
    for p in range(npages):
        count = min(page_n, nelmts - p * page_n)
        if bitmap[p // 8] & (0x80 >> (p % 8)):
            yield from _page(f, emit, page_at, p * page_n, count, elem_size, "fixed array page")
        page_at += count * elem_size + 4


def _extensible_array(f: HDF5File, g: _Geometry, header: int) -> Iterator[ChunkRecord]:
    if len(g.unlimited) != 1:
        raise FormatError("extensible array chunk index needs exactly one unlimited dimension", offset=header)
    hc = f._cursor(header)
    hc.signature(b"EAHD", "extensible array header")
    hc.u8()
    client = hc.u8()
    elem_size = hc.u8()
    max_bits = hc.u8()
    idx_elmts = hc.u8()
    dblk_min = hc.u8()
    sblk_min_ptrs = hc.u8()
    page_bits = hc.u8()
    for _ in range(6):
        hc.length()  # statistics
    iblock = hc.address()
    _checked(f, header, hc.pos, "extensible array header")
    if iblock is None:
        return
    for name, v in (("data block minimum", dblk_min), ("super block minimum pointers", sblk_min_ptrs)):
        if v == 0 or v & (v - 1):
            raise FormatError(f"extensible array {name} {v} is not a power of two", offset=header)
    if not 0 < max_bits <= 64 or page_bits >= 64:
        raise FormatError("extensible array parameters out of range", offset=header)
    decode = _element_decoder(f, client, elem_size, header)
    arr_off = (max_bits + 7) // 8
    page_n = 1 << page_bits
    osz = f.offset_size

    # super block table: (number of data blocks, elements per data block)
    nsblks = 1 + max_bits - (dblk_min.bit_length() - 1)
    sblk = [(1 << (u // 2), (1 << ((u + 1) // 2)) * dblk_min) for u in range(max(nsblks, 0))]
    iblock_nsblks = 2 * (sblk_min_ptrs.bit_length() - 1)
    ndblk_addrs = 2 * (sblk_min_ptrs - 1)
    nsblk_addrs = max(nsblks - iblock_nsblks, 0)

    # swizzle: the unlimited dimension becomes the slowest-varying one
    u = g.unlimited[0]
    sw_max = (g.max_chunks[u], *g.max_chunks[:u], *g.max_chunks[u + 1 :])
    down = _down(sw_max)

    def emit(idx: int, ec: Cursor) -> ChunkRecord | None:
        addr, size, mask = decode(ec)
        if addr is None:
            return None
        sw = _unlinear(idx, down, sw_max)
        coords = (*sw[1 : u + 1], sw[0], *sw[u + 1 :])
        if not all(ci < ni for ci, ni in zip(coords, g.nchunks)):
            return None
        return ChunkRecord(coords, addr, g.chunk_bytes if size is None else size, mask)

    ib = iblock + f.base
    ic = _array_block(f, ib, b"EAIB", "extensible array index block")
    ic.need(idx_elmts * elem_size + (ndblk_addrs + nsblk_addrs) * osz)
    yield from _emitted(emit, ic, 0, idx_elmts)
    dblk_addrs = [ic.address() for _ in range(ndblk_addrs)]
    sblk_addrs = [ic.address() for _ in range(nsblk_addrs)]
    _checked(f, ib, ic.pos, "extensible array index block")

    def data_block(
        addr: int | None, nelmts: int, first: int, page_ok: Callable[[int], bool] | None = None
    ) -> Iterator[ChunkRecord]:
        if addr is None:
            return
        at = addr + f.base
        dc = _array_block(f, at, b"EADB", "extensible array data block", arr_off)
        if nelmts <= page_n:
            dc.need(nelmts * elem_size)
            yield from _emitted(emit, dc, first, nelmts)
            _checked(f, at, dc.pos, "extensible array data block")
            return
        # paged: pages follow the data block prefix (whose checksum covers the prefix only)
        _checked(f, at, dc.pos, "extensible array data block")
        page_at = dc.pos + 4
        for p in range(nelmts // page_n):
            if page_ok is not None and not page_ok(p):
                page_at += page_n * elem_size + 4
                continue
            yield from _page(f, emit, page_at, first + p * page_n, page_n, elem_size, "extensible array page")
            page_at += page_n * elem_size + 4

    first = idx_elmts
    d = 0
    for s in range(min(iblock_nsblks, nsblks)):
        ndblks, nelmts = sblk[s]
        for _ in range(ndblks):
            if d < len(dblk_addrs):
                yield from data_block(dblk_addrs[d], nelmts, first)
            d += 1
            first += nelmts
    for j, saddr in enumerate(sblk_addrs):
        ndblks, nelmts = sblk[iblock_nsblks + j]
        if saddr is not None:
            at = saddr + f.base
            sc = _array_block(f, at, b"EASB", "extensible array secondary block", arr_off)
            npages = nelmts // page_n if nelmts > page_n else 0
            # libhdf5 sizes the bitmap as one byte-rounded mask per data block, but indexes the
            # bits contiguously (data block b, page p -> bit b * npages + p).
            bitmap = bytes(sc.bytes(ndblks * ((npages + 7) // 8))) if npages else b""
            sc.need(ndblks * osz)
            addrs = [sc.address() for _ in range(ndblks)]
            _checked(f, at, sc.pos, "extensible array secondary block")
            for b, daddr in enumerate(addrs):
                page_ok = _bit_reader(bitmap, b * npages) if npages else None
                yield from data_block(daddr, nelmts, first + b * nelmts, page_ok)
        first += ndblks * nelmts


def _bit_reader(bitmap: bytes, start: int) -> Callable[[int], bool]:
    """Page-initialised test for pages ``start + p`` of a bitmap (most significant bit first)."""

    def ok(p: int) -> bool:
        k = start + p
        return bool(bitmap[k // 8] & (0x80 >> (k % 8)))

    return ok


def _btree2(f: HDF5File, g: _Geometry, header: int) -> Iterator[ChunkRecord]:
    h, recs = btree2_records(f._cursor(0), header, f.base, f.limits, verify=f.verify_checksums)
    rank = len(g.dims)
    osz = f.offset_size
    if h.type == 10:
        size_len = None
        if h.record_size != osz + 8 * rank:
            raise FormatError("v2 B-tree chunk record size does not match the dataset rank", offset=header)
    elif h.type == 11:
        size_len = h.record_size - osz - 4 - 8 * rank
        if not 1 <= size_len <= 8:
            raise FormatError("v2 B-tree filtered chunk record size is inconsistent", offset=header)
    else:
        raise FormatError(f"v2 B-tree record type {h.type} is not a chunk index", offset=header)
    for rec in recs:
        rc = Cursor(rec, 0, offset_size=osz, length_size=f.length_size)
        addr = rc.address()
        size, mask = g.chunk_bytes, 0
        if size_len is not None:
            size = rc.uint(size_len)
            mask = rc.u32()
        coords = tuple(rc.u64() for _ in range(rank))
        if addr is None:
            continue
        yield ChunkRecord(coords, addr + f.base, size, mask)


# --- reading -------------------------------------------------------------------------------------
def single_unfiltered_chunk(f: HDF5File, obj: ObjectHeader, nbytes: int) -> tuple[int, int] | None:
    """``(offset, nbytes)`` when one unfiltered chunk holds exactly the whole dataset, else None."""
    layout = obj.layout
    assert layout is not None
    if obj.filters or nbytes == 0:
        return None
    g = _Geometry(f, obj, layout)
    if g.chunk != g.dims:
        return None
    chunks = list(iter_chunks(f, obj))
    if len(chunks) != 1:
        return None
    rec = chunks[0]
    if rec.offset + nbytes > f.size:
        raise FormatError("chunk runs past the end of the file", offset=rec.offset)
    return rec.offset, nbytes


def read_chunked(f: HDF5File, obj: ObjectHeader, nbytes: int) -> memoryview:
    """Assemble a chunked dataset into C-ordered bytes (fill value where no chunk is stored)."""
    layout = obj.layout
    assert layout is not None
    g = _Geometry(f, obj, layout)
    filters = obj.filters
    out = np.zeros((*g.dims, g.elem), dtype=np.uint8)
    fill = obj.fill_value
    if fill is not None and len(fill) == g.elem and any(fill):
        out[...] = np.frombuffer(fill, dtype=np.uint8)
    dont_filter_edges = bool(layout.flags & 0x01)
    for rec in iter_chunks(f, obj):
        if any(ci >= ni for ci, ni in zip(rec.coords, g.nchunks)):
            continue  # beyond the current extent (dataset was shrunk)
        if rec.offset + rec.size > f.size:
            raise FormatError(f"chunk of {rec.size} bytes runs past the end of the file", offset=rec.offset)
        f.prefetch(rec.offset, rec.size)
        stored = f.buffer[rec.offset : rec.offset + rec.size]
        if filters and not (dont_filter_edges and g.is_partial(rec.coords)):
            data = decode_chunk(stored, filters, rec.filter_mask, g.chunk_bytes, offset=rec.offset)
        else:
            data = stored
        if len(data) < g.chunk_bytes:
            raise FormatError(
                f"chunk decodes to {len(data)} bytes, {g.chunk_bytes} expected", offset=rec.offset
            )
        chunk = np.frombuffer(data, dtype=np.uint8, count=g.chunk_bytes).reshape((*g.chunk, g.elem))
        dst = []
        src = []
        for ci, k, d in zip(rec.coords, g.chunk, g.dims):
            lo = ci * k
            hi = min(lo + k, d)
            dst.append(slice(lo, hi))
            src.append(slice(0, hi - lo))
        out[tuple(dst)] = chunk[tuple(src)]
    if out.nbytes != nbytes:
        raise FormatError("assembled chunk data has the wrong size", offset=obj.offset)
    return out.reshape(-1).data
