"""A small, independent raw-byte builder of JLD2-like files, for the reader's targeted tests.

It writes what JLD2.jl 0.6 writes in structure (user block, superblock v2 with base 512, OHDR v2
objects, committed types in ``/_types`` with ``julia_type`` attributes of the bootstrap
``Core.DataType`` type, global-heap vlen data, compact/contiguous/single-chunk-deflate layouts),
but not byte for byte (allocation order and filler differ). It exists so value kinds that no
Julia-written fixture contains (Float16, BFloat16, Complex arrays, Int128, Char, Memory, 0-dim
arrays, ghost arrays, compressed arrays, big-endian numbers, ...) can be tested without the
writer. Every file it makes is also checked to open in h5py where h5py can read it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from treexchange._hdf5._lookup3 import lookup3

UNDEF = 0xFFFF_FFFF_FFFF_FFFF
BASE = 512


# --- datatypes (encoded bytes) ---------------------------------------------------------------


def _dt(cls: int, flags: int, size: int, props: bytes = b"", version: int = 1) -> bytes:
    return bytes([(version << 4) | cls]) + flags.to_bytes(3, "little") + struct.pack("<I", size) + props


def t_int(size: int, signed: bool = True, big: bool = False) -> bytes:
    return _dt(0, (0x08 if signed else 0) | (1 if big else 0), size, struct.pack("<HH", 0, 8 * size))


def t_float(size: int, big: bool = False) -> bytes:
    layout = {2: (16, 10, 5, 0, 10, 15), 4: (32, 23, 8, 0, 23, 127), 8: (64, 52, 11, 0, 52, 1023)}[size]
    prec, eloc, esize, mloc, msize, bias = layout
    flags = 0x20 | ((size * 8 - 1) << 8) | (1 if big else 0)
    return _dt(1, flags, size, struct.pack("<HHBBBBI", 0, prec, eloc, esize, mloc, msize, bias))


def t_bool() -> bytes:
    return _dt(4, 0, 1, struct.pack("<HH", 0, 8))


def t_opaque(size: int) -> bytes:
    return _dt(5, 0, size)


def t_ref() -> bytes:
    return _dt(7, 0, 8)


def t_fixed_string(n: int) -> bytes:
    return _dt(3, 0x11, n)


def t_vlen_string() -> bytes:
    return _dt(9, 0x0101 | 0x10, 16, _dt(0, 0, 1, struct.pack("<HH", 0, 8), version=3), version=1)


def t_vlen(base: bytes) -> bytes:
    return _dt(9, 0, 16, base)


def t_compound(members: Sequence[tuple[str, bytes, int]]) -> bytes:
    """Version-3 packed compound; ``members`` = (name, encoded type, size)."""
    size = sum(m[2] for m in members)
    width = 1 if size < 256 else 2 if size < 65536 else 4
    props = b""
    off = 0
    for name, enc, msize in members:
        props += name.encode() + b"\x00" + off.to_bytes(width, "little") + enc
        off += msize
    return _dt(6, len(members), size, props, version=3)


def shared(addr: int) -> bytes:
    return bytes([3, 2]) + struct.pack("<Q", addr)


# --- messages -------------------------------------------------------------------------------


def msg(mtype: int, body: bytes, flags: int = 0) -> bytes:
    return struct.pack("<BHB", mtype, len(body), flags) + body


def space(kind: str, dims: Sequence[int] = ()) -> bytes:
    code = {"scalar": 0, "simple": 1, "null": 2}[kind]
    return bytes([2, len(dims), 0, code]) + b"".join(struct.pack("<Q", d) for d in dims)


def attribute(name: str, dtype: bytes, sp: bytes, data: bytes, *, is_shared: bool = False) -> bytes:
    raw = name.encode() + b"\x00"
    body = bytes([2, 1 if is_shared else 0]) + struct.pack("<HHH", len(raw), len(dtype), len(sp))
    return msg(12, body + raw + dtype + sp + data)


@dataclass
class Attr:
    name: str
    dtype: bytes
    space: bytes
    data: bytes
    shared: bool = False

    def encode(self) -> bytes:
        return attribute(self.name, self.dtype, self.space, self.data, is_shared=self.shared)


class Builder:
    """Appends objects to a file image; addresses are relative to base 512."""

    def __init__(self, header: str = "HDF5-based Julia Data Format, version 0.2.0") -> None:
        ub = bytearray(512)
        text = header.encode() + b"\x00 (Julia 1.11.1 64-bit LE)\x00"
        ub[: len(text)] = text
        self.buf = bytearray(ub) + bytearray(48)  # superblock filled in by finish()
        self.types: list[int] = []
        self.root_links: list[tuple[str, int]] = []
        self._datatype_addr: int | None = None
        self._symbol_addr: int | None = None
        self._ghosts: dict[str, int] = {}

    # --- raw placement ----------------------------------------------------------------------
    def here(self) -> int:
        return len(self.buf) - BASE

    def put(self, data: bytes, align: int = 1) -> int:
        while len(self.buf) % align:
            self.buf.append(0)
        addr = self.here()
        self.buf += data
        return addr

    def object(self, messages: Sequence[bytes]) -> int:
        payload = b"".join(messages)
        n = len(payload)
        width = 0 if n < 256 else 1 if n < 65536 else 2
        head = b"OHDR" + bytes([2, width]) + n.to_bytes(1 << width, "little")
        body = head + payload
        return self.put(body + struct.pack("<I", lookup3(body)))

    def heap(self, payload: bytes) -> bytes:
        """Store ``payload`` in its own global heap collection; return the 12-byte heap ID part."""
        padded = payload + bytes(-len(payload) % 8)
        objects = struct.pack("<HHIQ", 1, 1, 0, len(payload)) + padded
        total = 16 + len(objects) + 16
        total = max(total, 4096)
        free = total - 16 - len(objects)
        body = b"GCOL" + bytes([1, 0, 0, 0]) + struct.pack("<Q", total) + objects
        body += struct.pack("<HHIQ", 0, 0, 0, free - 16) + bytes(free - 16)
        addr = self.put(body, align=8)
        return struct.pack("<QI", addr, 1)

    def vlen(self, payload: bytes, count: int) -> bytes:
        if count == 0:
            return bytes(16)
        return struct.pack("<I", count) + self.heap(payload)

    def vstr(self, text: str) -> bytes:
        raw = text.encode()
        return self.vlen(raw, len(raw))

    # --- JLD2 types -------------------------------------------------------------------------
    def commit(
        self, dtype: bytes, jtype: bytes | None, attrs: Sequence[Attr] = (), written: bytes | None = None
    ) -> int:
        msgs = [msg(3, dtype, 0x41)]
        if jtype is not None:
            msgs.append(
                Attr("julia_type", shared(self.datatype_type()), space("scalar"), jtype, True).encode()
            )
        if written is not None:
            msgs.append(
                Attr("written_type", shared(self.datatype_type()), space("scalar"), written, True).encode()
            )
        msgs += [a.encode() for a in attrs]
        addr = self.object(msgs)
        self.types.append(addr)
        return addr

    def datatype_type(self) -> int:
        """The bootstrap ``Core.DataType`` committed type (its julia_type refers to itself)."""
        if self._datatype_addr is None:
            dtype = t_compound([("name", t_vlen_string(), 16), ("parameters", t_vlen(t_ref()), 16)])
            value = self.vstr("Core.DataType") + bytes(16)
            # Its address is where the next object goes: the attribute refers to itself.
            addr = self.here()
            msgs = [
                msg(3, dtype, 0x41),
                Attr("julia_type", shared(addr), space("scalar"), value, True).encode(),
            ]
            assert self.object(msgs) == addr
            self.types.insert(0, addr)
            self._datatype_addr = addr
        return self._datatype_addr

    def jt(self, name: str, params: Sequence[int] = ()) -> bytes:
        """A 32-byte ``Core.DataType`` value: name + references to parameter objects."""
        refs = b"".join(struct.pack("<Q", p) for p in params)
        return self.vstr(name) + self.vlen(refs, len(params))

    def jt_dataset(self, name: str, params: Sequence[int] = ()) -> int:
        """An unlinked ``Core.DataType`` dataset (a type parameter such as ``Core.Float32``)."""
        return self.dataset(shared(self.datatype_type()), space("scalar"), self.jt(name, params))

    def int_dataset(self, value: int) -> int:
        return self.dataset(t_int(8), space("scalar"), struct.pack("<q", value))

    def symbol_type(self) -> int:
        if self._symbol_addr is None:
            self._symbol_addr = self.commit(t_vlen_string(), self.jt("Core.Symbol"))
        return self._symbol_addr

    def ghost(self, name: str, params: Sequence[int] = ()) -> int:
        key = f"{name}{list(params)}"
        if key not in self._ghosts:
            empty = Attr("empty", t_int(1, signed=False), space("scalar"), b"\x01")
            self._ghosts[key] = self.commit(t_opaque(1), self.jt(name, params), [empty])
        return self._ghosts[key]

    def field_attrs(self, names: Sequence[str], types: Sequence[int]) -> list[Attr]:
        data = b"".join(self.vstr(n) for n in names)
        refs = b"".join(struct.pack("<Q", t) for t in types)
        return [
            Attr("field_names", t_vlen_string(), space("simple", [len(names)]), data),
            Attr("field_types", t_ref(), space("simple", [len(types)]), refs),
        ]

    def names_tuple(self, names: Sequence[str]) -> int:
        """A dataset holding the names tuple of a NamedTuple type parameter."""
        sym = self.symbol_type()
        n = len(names)
        members = [(str(i + 1), t_vlen_string(), 16) for i in range(n)]
        tt = self.commit(
            t_compound(members),
            self.jt("Tuple", [sym] * n),
            self.field_attrs([str(i + 1) for i in range(n)], [sym] * n),
        )
        data = b"".join(self.vstr(x) for x in names)
        return self.dataset(shared(tt), space("scalar"), data)

    # --- datasets ---------------------------------------------------------------------------
    def dataset(
        self,
        dtype: bytes,
        sp: bytes,
        data: bytes,
        attrs: Sequence[Attr] = (),
        *,
        layout: str = "auto",
        chunk_dims: Sequence[int] = (),
    ) -> int:
        is_shared = dtype[:2] == bytes([3, 2]) and len(dtype) == 10
        msgs = [msg(5, bytes([3, 9])), msg(1, sp)]
        msgs += [a.encode() for a in attrs]
        msgs.append(msg(3, dtype, 3 if is_shared else 1))
        if layout == "auto":
            layout = "compact" if len(data) < 8192 else "contiguous"
        if layout == "compact":
            msgs.append(msg(8, bytes([4, 0]) + struct.pack("<H", len(data)) + data))
            return self.object(msgs)
        if layout == "contiguous":
            addr = self.put(data, align=8) if data else UNDEF
            msgs.append(msg(8, bytes([4, 1]) + struct.pack("<QQ", addr, len(data))))
            return self.object(msgs)
        if layout == "deflate":
            comp = zlib.compress(data, 5)
            addr = self.put(comp)
            pipeline = bytes([2, 1]) + struct.pack("<HHH", 1, 0, 1) + struct.pack("<I", 5)
            msgs.append(msg(11, pipeline))
            dims = b"".join(struct.pack("<Q", d) for d in chunk_dims)
            body = bytes([4, 2, 2, len(chunk_dims), 8]) + dims + bytes([1])
            body += struct.pack("<QIQ", len(comp), 0, addr)
            msgs.append(msg(8, body))
            return self.object(msgs)
        raise ValueError(layout)

    def array(
        self, arr: np.ndarray, attrs: Sequence[Attr] = (), *, dtype: bytes | None = None, **kw: object
    ) -> int:
        """A Julia array of numbers: HDF5 dims = Julia dims reversed, bytes in F order."""
        a = np.asarray(arr)
        if dtype is None:
            dtype = _numpy_type(a.dtype)
        data = a.tobytes(order="F")
        return self.dataset(dtype, space("simple", a.shape[::-1]), data, attrs, **kw)  # type: ignore[arg-type]

    def link(self, name: str, addr: int) -> None:
        self.root_links.append((name, addr))

    def group(self, links: Sequence[tuple[str, int]]) -> int:
        msgs = [msg(2, bytes([0, 0]) + struct.pack("<QQ", UNDEF, UNDEF)), msg(10, bytes([0, 0]))]
        for name, addr in links:
            raw = name.encode()
            msgs.append(msg(6, bytes([1, 0x10, 1, len(raw)]) + raw + struct.pack("<Q", addr)))
        return self.object(msgs)

    def finish(self) -> bytes:
        links = list(self.root_links)
        if self.types:
            types = self.group([(f"{i + 1:08d}", a) for i, a in enumerate(self.types)])
            links.append(("_types", types))
        root = self.group(links)
        eof = len(self.buf)
        sb = b"\x89HDF\r\n\x1a\n" + bytes([2, 8, 8, 0]) + struct.pack("<QQQQ", BASE, UNDEF, eof, root)
        sb += struct.pack("<I", lookup3(sb))
        self.buf[512:560] = sb
        return bytes(self.buf)


def _numpy_type(dt: np.dtype) -> bytes:
    big = dt.byteorder == ">"
    if dt.kind == "b":
        return t_bool()
    if dt.kind in "iu":
        return t_int(dt.itemsize, dt.kind == "i", big)
    if dt.kind == "f":
        return t_float(dt.itemsize, big)
    raise TypeError(dt)
