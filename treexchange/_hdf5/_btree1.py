"""Version-1 B-trees (``TREE``), local heaps (``HEAP``) and symbol table nodes (``SNOD``).

These are the "old-style" structures: symbol-table groups (HDF5 1.6 layout, still h5py's default)
and the chunk index of data layout version 3.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .._errors import FormatError, LimitError
from .._limits import Limits
from ._cursor import Cursor


@dataclass(frozen=True)
class ChunkRecord:
    """One chunk found in a chunk index: element offsets of its first element, location, mask."""

    coords: tuple[int, ...]  # scaled (chunk index) coordinates, one per dataset dimension
    offset: int  # absolute
    size: int  # stored (filtered) bytes
    filter_mask: int = 0


def _walk(
    c: Cursor, root: int, base: int, node_type: int, key_size: int, limits: Limits
) -> Iterator[tuple[memoryview, int]]:
    """Yield ``(left key bytes, relative child address)`` of every leaf entry, in key order.

    ``root`` is absolute; child addresses are relative to ``base``.

    Guards: every node is visited once, levels must strictly decrease, counts fit the file.
    """
    seen: set[int] = set()
    stack: list[tuple[int, int | None]] = [(root, None)]
    while stack:
        offset, expect_level = stack.pop()
        if offset in seen:
            raise FormatError("v1 B-tree node visited twice (cycle)", offset=offset)
        seen.add(offset)
        if len(seen) > limits.max_objects:
            raise LimitError("v1 B-tree has more nodes than max_objects", offset=offset)
        nc = c.at(offset)
        nc.signature(b"TREE", "v1 B-tree node")
        t = nc.u8()
        if t != node_type:
            raise FormatError(f"v1 B-tree node type {t}, expected {node_type}", offset=offset + 4)
        level = nc.u8()
        if expect_level is not None and level != expect_level:
            raise FormatError(f"v1 B-tree node level {level}, expected {expect_level}", offset=offset + 5)
        used = nc.u16()
        nc.address()  # left sibling
        nc.address()  # right sibling
        entry = key_size + nc.offset_size
        nc.need(used * entry + key_size)
        children: list[tuple[memoryview, int]] = []
        for _ in range(used):
            key = nc.bytes(key_size)
            child = nc.address()
            if child is None:
                raise FormatError("v1 B-tree child with undefined address", offset=nc.pos - nc.offset_size)
            children.append((key, child))
        if level == 0:
            yield from children
        else:
            # depth first, left to right: push in reverse
            for _key, child in reversed(children):
                stack.append((child + base, level - 1))


def group_entries(c: Cursor, btree: int, heap: int, base: int, limits: Limits) -> Iterator[tuple[bytes, int]]:
    """Symbol-table group: ``(name, relative object address)`` in B-tree (name) order.

    ``btree`` and ``heap`` are absolute offsets.
    """
    data_at, data_size = local_heap(c, heap, base)
    for _key, snod_addr in _walk(c, btree, base, 0, c.length_size, limits):
        sc = c.at(snod_addr + base)
        sc.signature(b"SNOD", "symbol table node")
        version = sc.u8()
        if version != 1:
            raise FormatError(f"unknown symbol table node version {version}", offset=snod_addr + base + 4)
        sc.u8()
        n = sc.u16()
        for _ in range(n):
            name_off = sc.uint(c.offset_size)  # symbol table entries use offset width
            obj = sc.address()
            sc.u32()  # cache type
            sc.u32()
            sc.skip(16)  # scratch pad
            if name_off >= data_size:
                raise FormatError("symbol name offset outside the local heap", offset=sc.pos - 40)
            name = c.at(data_at + name_off, data_at + data_size).cstring()
            if obj is None:
                raise FormatError("symbol table entry with undefined address", offset=sc.pos)
            yield name, obj


def local_heap(c: Cursor, offset: int, base: int) -> tuple[int, int]:
    """Local heap at absolute ``offset``: ``(absolute data segment offset, data segment size)``."""
    hc = c.at(offset)
    hc.signature(b"HEAP", "local heap")
    version = hc.u8()
    if version != 0:
        raise FormatError(f"unknown local heap version {version}", offset=offset + 4)
    hc.skip(3)
    size = hc.length()
    hc.length()  # free list head
    data = hc.address()
    if data is None:
        raise FormatError("local heap without a data segment", offset=offset)
    if data + base + size > len(c.buf):
        raise FormatError("local heap data segment runs past the end of the file", offset=offset)
    return data + base, size


def chunk_records(
    c: Cursor, btree: int, base: int, ndims: int, chunk_dims: tuple[int, ...], limits: Limits
) -> Iterator[ChunkRecord]:
    """Layout v3 chunk index: every chunk, with scaled coordinates.

    ``ndims`` counts the layout's dimensions *including* the trailing element-size dimension;
    keys hold element offsets, which we divide by the chunk dimensions.
    """
    key_size = 8 + 8 * ndims
    for key, child in _walk(c, btree, base, 1, key_size, limits):
        kc = Cursor(key, 0)
        size = kc.u32()
        mask = kc.u32()
        offs = tuple(kc.u64() for _ in range(ndims))
        coords = []
        for o, d in zip(offs[:-1], chunk_dims[:-1]):
            if d == 0 or o % d:
                raise FormatError("chunk offset is not a multiple of the chunk size", offset=child + base)
            coords.append(o // d)
        yield ChunkRecord(tuple(coords), child + base, size, mask)
