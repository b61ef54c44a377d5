"""Fractal heaps (``FRHP``/``FHDB``/``FHIB``): where dense groups keep link and attribute messages.

Only reading objects by heap ID is needed. Managed objects are located by walking the doubling
table from the root block; tiny objects live inside the ID; huge objects are supported when the
ID holds their address and length directly (unfiltered heaps), which is what libhdf5 writes for
heaps without I/O filters.
"""

from __future__ import annotations

from .._errors import FormatError, UnsupportedError
from .._limits import DEFAULT_LIMITS, Limits
from ._btree2 import records as btree2_records
from ._cursor import Cursor, enc_size
from ._lookup3 import lookup3


def _log2(n: int) -> int:
    return n.bit_length() - 1


class FractalHeap:
    """A fractal heap header at absolute ``offset``; :meth:`get` returns an object's bytes."""

    def __init__(
        self, c: Cursor, offset: int, base: int, *, verify: bool = False, limits: Limits = DEFAULT_LIMITS
    ) -> None:
        self.c = c
        self.verify = verify
        self.limits = limits
        self.base = base
        self.offset = offset
        hc = c.at(offset)
        hc.signature(b"FRHP", "fractal heap header")
        version = hc.u8()
        if version != 0:
            raise FormatError(f"unknown fractal heap version {version}", offset=offset + 4)
        self.id_len = hc.u16()
        self.filter_len = hc.u16()
        self.flags = hc.u8()
        self.max_managed = hc.u32()
        hc.length()  # next huge object id
        huge = hc.address()
        self.huge_btree = None if huge is None else huge + base
        self._huge: dict[int, tuple[int, int]] | None = None
        hc.length()  # free space in managed blocks
        hc.address()  # free space manager
        hc.length()  # managed space
        hc.length()  # allocated managed space
        hc.length()  # direct block allocation iterator offset
        hc.length()  # number of managed objects
        hc.length()  # size of huge objects
        hc.length()  # number of huge objects
        hc.length()  # size of tiny objects
        hc.length()  # number of tiny objects
        self.width = hc.u16()
        self.start_size = hc.length()
        self.max_direct = hc.length()
        self.max_heap_bits = hc.u16()
        hc.u16()  # starting number of rows in the root indirect block
        root = hc.address()
        self.root = None if root is None else root + base
        self.root_rows = hc.u16()
        if self.filter_len:
            hc.length()  # filtered root direct block size
            hc.u32()  # filter mask
            hc.skip(self.filter_len)
        end = hc.pos
        stored = hc.u32()
        if verify and lookup3(c.buf[offset:end]) != stored:
            raise FormatError("fractal heap header checksum mismatch", offset=end)
        for name, v in (("table width", self.width), ("starting block size", self.start_size)):
            if v == 0 or v & (v - 1):
                raise FormatError(f"fractal heap {name} {v} is not a power of two", offset=offset)
        if self.max_direct < self.start_size or self.max_direct & (self.max_direct - 1):
            raise FormatError("fractal heap maximum direct block size is invalid", offset=offset)
        if not 0 < self.max_heap_bits <= 64:
            raise FormatError(f"fractal heap address space of {self.max_heap_bits} bits", offset=offset)
        self.off_size = (self.max_heap_bits + 7) // 8
        self.len_size = min((_log2(self.max_direct) + 7) // 8, enc_size(self.max_managed))
        self.max_direct_rows = _log2(self.max_direct) - _log2(self.start_size) + 2
        self.block_off_size = self.off_size
        self.checksummed = bool(self.flags & 0x02)

    def _row_size(self, row: int) -> int:
        return self.start_size if row == 0 else self.start_size << (row - 1)

    def get(self, heap_id: bytes | memoryview) -> memoryview:
        """The bytes of the object with this heap ID."""
        return self.locate(heap_id)[1]

    def locate(self, heap_id: bytes | memoryview) -> tuple[int | None, memoryview]:
        """``(absolute offset or None for tiny objects, bytes)`` of the object with this heap ID."""
        hid = bytes(heap_id)
        if not hid:
            raise FormatError("empty fractal heap ID", offset=self.offset)
        kind = (hid[0] >> 4) & 0x03
        if hid[0] >> 6:
            raise FormatError(f"unknown fractal heap ID version {hid[0] >> 6}", offset=self.offset)
        if kind == 0:
            need = 1 + self.off_size + self.len_size
            if len(hid) < need:
                raise FormatError("fractal heap ID too short", offset=self.offset)
            off = int.from_bytes(hid[1 : 1 + self.off_size], "little")
            n = int.from_bytes(hid[1 + self.off_size : need], "little")
            start = self._managed(off, n)
            return start, self.c.buf[start : start + n]
        if kind == 2:
            if self.id_len <= 18:
                n = (hid[0] & 0x0F) + 1
                data = hid[1 : 1 + n]
            else:
                n = (((hid[0] & 0x0F) << 8) | hid[1]) + 1 if len(hid) > 1 else 0
                data = hid[2 : 2 + n]
            if len(data) != n:
                raise FormatError("tiny fractal heap object longer than its ID", offset=self.offset)
            return None, memoryview(data)
        if kind == 1:
            osz, lsz = self.c.offset_size, self.c.length_size
            if self.filter_len == 0 and len(hid) >= 1 + osz + lsz:
                # "directly accessed": the ID holds address and length
                addr = int.from_bytes(hid[1 : 1 + osz], "little") + self.base
                n = int.from_bytes(hid[1 + osz : 1 + osz + lsz], "little")
            else:
                addr, n = self._huge_lookup(int.from_bytes(hid[1:], "little"))
            if addr + n > len(self.c.buf):
                raise FormatError("huge fractal heap object runs past the end of the file", offset=addr)
            return addr, self.c.buf[addr : addr + n]
        raise FormatError(f"unknown fractal heap ID type {kind}", offset=self.offset)

    def _huge_lookup(self, huge_id: int) -> tuple[int, int]:
        """Huge objects too big for the ID: look the ID up in the huge-object v2 B-tree."""
        if self._huge is None:
            if self.huge_btree is None:
                raise FormatError("huge fractal heap object but no huge-object B-tree", offset=self.offset)
            h, recs = btree2_records(self.c, self.huge_btree, self.base, self.limits, verify=self.verify)
            if h.type != 1:
                raise UnsupportedError(
                    f"huge fractal heap objects of B-tree record type {h.type} (filtered) are not supported",
                    offset=self.huge_btree,
                )
            table: dict[int, tuple[int, int]] = {}
            for rec in recs:
                rc = Cursor(rec, 0, offset_size=self.c.offset_size, length_size=self.c.length_size)
                addr = rc.address()
                n = rc.length()
                oid = rc.length()
                if addr is not None:
                    table[oid] = (addr + self.base, n)
            self._huge = table
        try:
            return self._huge[huge_id]
        except KeyError:
            raise FormatError(
                f"huge fractal heap object {huge_id} not found", offset=self.huge_btree
            ) from None

    def _managed(self, off: int, n: int) -> int:
        if self.root is None:
            raise FormatError("fractal heap has no root block", offset=self.offset)
        if self.filter_len:
            raise UnsupportedError("fractal heaps with I/O filters are not supported", offset=self.offset)
        block, block_off, size = self._find(off)
        local = off - block_off
        if local + n > size:
            raise FormatError("fractal heap object runs past its direct block", offset=block)
        start = block + local
        if start + n > len(self.c.buf):
            raise FormatError("fractal heap object runs past the end of the file", offset=start)
        return start

    def _find(self, off: int) -> tuple[int, int, int]:
        """``(absolute direct block offset, its heap offset, its size)`` holding heap offset ``off``."""
        root = self.root
        if root is None:
            raise FormatError("fractal heap has no root block", offset=self.offset)
        if self.root_rows == 0:
            self._check_direct(root, 0)
            return root, 0, self.start_size
        block, rows, block_base = root, self.root_rows, 0
        for _ in range(64):  # each step descends one indirect level; 64 bits of address space
            ic = self.c.at(block)
            ic.signature(b"FHIB", "fractal heap indirect block")
            ic.u8()
            ic.address()
            ic.skip(self.block_off_size)
            rel = off - block_base
            row, row_start = 0, 0
            while True:
                span = self.width * self._row_size(row)
                if rel < row_start + span:
                    break
                row_start += span
                row += 1
                if row >= rows:
                    raise FormatError(f"fractal heap offset {off} outside the heap", offset=block)
            size = self._row_size(row)
            col = (rel - row_start) // size
            direct_rows = min(rows, self.max_direct_rows)
            # entries before ours: direct entries, then indirect ones (no filters: address only)
            index = row * self.width + col
            ic.skip(index * self.c.offset_size)
            addr = ic.address()
            if addr is None:
                raise FormatError("fractal heap block not allocated", offset=ic.pos)
            child_base = block_base + row_start + col * size
            if row < direct_rows:
                self._check_direct(addr + self.base, child_base)
                return addr + self.base, child_base, size
            block = addr + self.base
            rows = _log2(size) - _log2(self.start_size * self.width) + 1
            block_base = child_base
        raise FormatError("fractal heap indirect blocks nest too deeply", offset=block)

    def _check_direct(self, at: int, block_off: int) -> None:
        dc = self.c.at(at)
        dc.signature(b"FHDB", "fractal heap direct block")
