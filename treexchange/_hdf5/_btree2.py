"""Version-2 B-trees (``BTHD``/``BTIN``/``BTLF``): in-order iteration over raw records.

Used for dense link and attribute name/creation-order indexes and for the chunk index of layout
v4 type 5. Records are returned as raw bytes; the caller knows the record type's layout.

Internal nodes store, for each child, its address, its record count and (above the lowest
internal level) the total record count below it. Those counters are as wide as needed for the
maximum counts a node of that depth can hold, which we derive from the node size exactly as the
format defines it (``max_nrec`` and ``cum_max_nrec`` per level).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .._errors import FormatError, LimitError
from .._limits import Limits
from ._cursor import Cursor, enc_size
from ._lookup3 import lookup3

_PREFIX = 10  # signature 4 + version 1 + type 1 + checksum 4


@dataclass(frozen=True)
class BTree2Header:
    type: int
    node_size: int
    record_size: int
    depth: int
    root: int | None  # absolute
    root_nrec: int
    total: int


def read_header(c: Cursor, offset: int, base: int, *, verify: bool = False) -> BTree2Header:
    hc = c.at(offset)
    hc.signature(b"BTHD", "v2 B-tree header")
    version = hc.u8()
    if version != 0:
        raise FormatError(f"unknown v2 B-tree version {version}", offset=offset + 4)
    btype = hc.u8()
    node_size = hc.u32()
    record_size = hc.u16()
    depth = hc.u16()
    hc.u8()  # split percent
    hc.u8()  # merge percent
    root = hc.address()
    root_nrec = hc.u16()
    total = hc.length()
    end = hc.pos
    stored = hc.u32()
    if verify and lookup3(c.buf[offset:end]) != stored:
        raise FormatError("v2 B-tree header checksum mismatch", offset=end)
    if record_size == 0 or node_size <= _PREFIX:
        raise FormatError("v2 B-tree with zero record size or tiny nodes", offset=offset)
    return BTree2Header(
        btype, node_size, record_size, depth, None if root is None else root + base, root_nrec, total
    )


def _level_sizes(h: BTree2Header, offset_size: int) -> tuple[int, list[int]]:
    """``(max_nrec_size, cum_max_nrec_size per depth)`` as the format derives them."""
    max_nrec = [(h.node_size - _PREFIX) // h.record_size]
    cum_max = [max_nrec[0]]
    cum_size = [0]
    nrec_size = enc_size(max_nrec[0])
    for d in range(1, h.depth + 1):
        ptr = offset_size + nrec_size + (cum_size[d - 1] if d > 1 else 0)
        n = (h.node_size - (_PREFIX + cum_size[d - 1])) // (h.record_size + ptr)
        if n <= 0:
            raise FormatError("v2 B-tree nodes too small for their depth")
        max_nrec.append(n)
        cum_max.append((n + 1) * cum_max[d - 1] + n)
        cum_size.append(enc_size(cum_max[d]))
    return nrec_size, cum_size


def records(
    c: Cursor, offset: int, base: int, limits: Limits, *, verify: bool = False
) -> tuple[BTree2Header, list[memoryview]]:
    """Every record of the v2 B-tree whose header is at absolute ``offset``, in key order."""
    h = read_header(c, offset, base, verify=verify)
    if h.depth > 64:
        raise FormatError(f"v2 B-tree depth {h.depth} is implausible", offset=offset)
    if h.root is None or h.total == 0:
        return h, []
    nrec_size, cum_size = _level_sizes(h, c.offset_size)
    out: list[memoryview] = []
    seen: set[int] = set()

    def visit(node: int, nrec: int, depth: int) -> Iterator[memoryview]:
        if node in seen:
            raise FormatError("v2 B-tree node visited twice (cycle)", offset=node)
        seen.add(node)
        if len(seen) > limits.max_objects:
            raise LimitError("v2 B-tree has more nodes than max_objects", offset=node)
        nc = c.at(node, node + h.node_size)
        if depth == 0:
            nc.signature(b"BTLF", "v2 B-tree leaf node")
        else:
            nc.signature(b"BTIN", "v2 B-tree internal node")
        nc.u8()  # version
        t = nc.u8()
        if t != h.type:
            raise FormatError(f"v2 B-tree node type {t}, expected {h.type}", offset=node + 5)
        nc.need(nrec * h.record_size)
        recs = [nc.bytes(h.record_size) for _ in range(nrec)]
        if depth == 0:
            if verify:
                _verify(c, node, nc.pos)
            yield from recs
            return
        children = []
        for _ in range(nrec + 1):
            addr = nc.address()
            n = nc.uint(nrec_size)
            if depth > 1:
                nc.uint(cum_size[depth - 1])
            if addr is None:
                raise FormatError("v2 B-tree child with undefined address", offset=nc.pos)
            children.append((addr + base, n))
        if verify:
            _verify(c, node, nc.pos)
        for i, (addr, n) in enumerate(children):
            yield from visit(addr, n, depth - 1)
            if i < nrec:
                yield recs[i]

    for rec in visit(h.root, h.root_nrec, h.depth):
        out.append(rec)
        if len(out) > h.total:
            raise FormatError("v2 B-tree holds more records than its header says", offset=offset)
    return h, out


def _verify(c: Cursor, node: int, end: int) -> None:
    stored = int.from_bytes(c.buf[end : end + 4], "little")
    if lookup3(c.buf[node:end]) != stored:
        raise FormatError("v2 B-tree node checksum mismatch", offset=end)
