"""The HDF5 structures treexchange reads and writes, as plain immutable data.

Parsing (``_hdf5`` reader modules) produces these; the JLD2 writer builds them and encodes them.
Nothing here touches a file.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

import numpy as np


class H5Class(enum.IntEnum):
    """HDF5 datatype classes (low nibble of the datatype message's first byte)."""

    FIXED = 0
    FLOAT = 1
    TIME = 2
    STRING = 3
    BITFIELD = 4
    OPAQUE = 5
    COMPOUND = 6
    REFERENCE = 7
    ENUM = 8
    VLEN = 9
    ARRAY = 10


@dataclass(frozen=True)
class Member:
    """One member of a compound datatype: name, byte offset inside the element, type."""

    name: str
    offset: int
    type: H5Type

    @classmethod
    def made(cls, name: str, offset: int, type: H5Type) -> Member:
        """``Member(name, offset, type)`` without the frozen dataclass ``__init__`` (see
        :meth:`H5Type.made`).

        Example:
            >>> t = H5Type(H5Class.FIXED, 1, 0, 1)
            >>> Member.made("a", 0, t) == Member("a", 0, t)
            True
        """
        obj = object.__new__(cls)
        d = obj.__dict__
        d["name"], d["offset"], d["type"] = name, offset, type
        return obj


@dataclass(frozen=True)
class H5Type:
    """An HDF5 datatype.

    ``props`` holds the raw property bytes that follow the 8-byte datatype header, so a type read
    from a file can be re-encoded exactly. ``committed_at`` is the relative address of the committed
    (named) datatype object the type was shared from; it takes no part in equality, so two types
    compare equal when their encodings describe the same layout.
    """

    cls: H5Class
    version: int
    flags: int
    size: int
    props: bytes = b""
    members: tuple[Member, ...] = ()
    base: H5Type | None = None
    dims: tuple[int, ...] = ()
    enum_names: tuple[str, ...] = ()
    enum_values: tuple[bytes, ...] = ()
    tag: bytes = b""
    committed_at: int | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        # Computed once: a compound holds its members' types whole, so hashing it afresh is as
        # long as its description, and a struct nested n deep is hashed at each of its n levels
        # (the writer's type lookups): quadratic in the depth without the cache.
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(
                (
                    self.cls,
                    self.version,
                    self.flags,
                    self.size,
                    self.props,
                    self.members,
                    self.base,
                    self.dims,
                    self.enum_names,
                    self.enum_values,
                    self.tag,
                )
            )
            object.__setattr__(self, "_hash", cached)
        return cached

    @classmethod
    def made(
        cls, h5cls: H5Class, version: int, flags: int, size: int, props: bytes, **more: object
    ) -> H5Type:
        """``H5Type(h5cls, version, flags, size, props, **more)``, made without the frozen
        dataclass ``__init__`` (one ``object.__setattr__`` per field, twelve of them: the largest
        cost of decoding a small datatype). Defaults are class attributes, so only the fields
        given go in ``__dict__``; the result compares and hashes as the ``__init__`` one does.

        Example:
            >>> H5Type.made(H5Class.FIXED, 1, 0x08, 8, b"") == H5Type(H5Class.FIXED, 1, 0x08, 8, b"")
            True
        """
        t = object.__new__(cls)
        d = t.__dict__
        d["cls"], d["version"], d["flags"], d["size"], d["props"] = h5cls, version, flags, size, props
        if more:
            d.update(more)
        return t

    def committed_as(self, address: int | None) -> H5Type:
        """This type with ``committed_at=address``: ``dataclasses.replace`` without running the
        frozen ``__init__`` again (no checks to repeat; a file's every committed type is one),
        keeping the cached hash (``committed_at`` takes no part in it) but not the writer's
        version-0 copy (which carries ``committed_at``)."""
        t = object.__new__(H5Type)
        t.__dict__.update(self.__dict__)
        t.__dict__["committed_at"] = address
        t.__dict__.pop("_version_zero", None)
        return t

    # --- derived views -----------------------------------------------------------------------
    @property
    def byte_order(self) -> str:
        """``'<'`` or ``'>'``: bit 0 of the class bit field for FIXED, FLOAT, BITFIELD; an ENUM's
        bit field holds its member count, so an ENUM takes the order of its base type."""
        if self.cls == H5Class.ENUM and self.base is not None:
            return self.base.byte_order
        return ">" if self.flags & 1 else "<"

    @property
    def signed(self) -> bool:
        """FIXED: whether the integer is two's-complement signed (bit 3)."""
        return bool(self.flags & 0x08)

    @property
    def is_vlen_string(self) -> bool:
        """VLEN whose type field (bits 0-3) says *string* (1) rather than *sequence* (0)."""
        return self.cls == H5Class.VLEN and (self.flags & 0x0F) == 1

    @property
    def string_padding(self) -> int:
        """STRING: 0 null-terminated, 1 null-padded, 2 space-padded. VLEN strings: bits 4-7."""
        return (self.flags >> 4) & 0x0F if self.cls == H5Class.VLEN else self.flags & 0x0F

    @property
    def charset(self) -> int:
        """STRING / VLEN string: 0 ASCII, 1 UTF-8."""
        return (self.flags >> 8) & 0x0F if self.cls == H5Class.VLEN else (self.flags >> 4) & 0x0F

    @property
    def ref_type(self) -> int:
        """REFERENCE: 0 object reference, 1 dataset region reference."""
        return self.flags & 0x0F

    def numpy_dtype(self) -> np.dtype | None:
        """The numpy dtype of a plain number type (FIXED 1/2/4/8 bytes, IEEE FLOAT 2/4/8 bytes,
        BITFIELD as unsigned), or ``None``.

        Example:
            >>> H5Type(H5Class.FIXED, 3, 0x08, 8).numpy_dtype()
            dtype('int64')
        """
        order = self.byte_order
        if self.cls == H5Class.FIXED and self.size in (1, 2, 4, 8):
            return np.dtype(f"{order}{'i' if self.signed else 'u'}{self.size}")
        if self.cls == H5Class.BITFIELD and self.size in (1, 2, 4, 8):
            return np.dtype(f"{order}u{self.size}")
        if self.cls == H5Class.FLOAT and self.size in (2, 4, 8) and self._is_ieee():
            return np.dtype(f"{order}f{self.size}")
        return None

    def _is_ieee(self) -> bool:
        # props: bit offset u16, precision u16, exp loc u8, exp size u8, mant loc u8, mant size u8,
        # bias u32. IEEE layouts: (10,5,0,10,15), (23,8,0,23,127), (52,11,0,52,1023).
        if len(self.props) < 12:
            return True
        exp_loc, exp_size, mant_loc, mant_size = self.props[4], self.props[5], self.props[6], self.props[7]
        bias = int.from_bytes(self.props[8:12], "little")
        return (exp_loc, exp_size, mant_loc, mant_size, bias) in {
            (10, 5, 0, 10, 15),
            (23, 8, 0, 23, 127),
            (52, 11, 0, 52, 1023),
        }


@dataclass(frozen=True)
class Dataspace:
    """Dataspace: ``dims`` in HDF5 order (Julia's dims reversed); ``()`` for scalar and null."""

    kind: Literal["scalar", "simple", "null"]
    dims: tuple[int, ...] = ()
    maxdims: tuple[int, ...] | None = None

    @classmethod
    def made(
        cls, kind: Literal["scalar", "simple", "null"], dims: tuple[int, ...], maxdims: tuple[int, ...] | None
    ) -> Dataspace:
        """``Dataspace(kind, dims, maxdims)`` without the frozen dataclass ``__init__`` (see
        :meth:`H5Type.made`).

        Example:
            >>> Dataspace.made("simple", (3,), None) == Dataspace("simple", (3,))
            True
        """
        obj = object.__new__(cls)
        d = obj.__dict__
        d["kind"], d["dims"], d["maxdims"] = kind, dims, maxdims
        return obj

    @property
    def count(self) -> int:
        """Number of elements: 1 for scalar, 0 for null."""
        return 0 if self.kind == "null" else math.prod(self.dims)


@dataclass(frozen=True)
class Filter:
    """One filter of a filter pipeline (1 deflate, 2 shuffle, 3 fletcher32, 32015 zstd, ...)."""

    id: int
    name: str = ""
    flags: int = 0
    client_data: tuple[int, ...] = ()


@dataclass(frozen=True)
class Layout:
    """Data layout message. Offsets here are ABSOLUTE file offsets (relative address + base)."""

    kind: Literal["compact", "contiguous", "chunked"]
    version: int
    data_offset: int | None = None
    data_size: int = 0
    chunk_dims: tuple[int, ...] = ()
    index_type: int | None = None
    index_address: int | None = None
    single_chunk_filtered_size: int | None = None
    single_chunk_filter_mask: int = 0
    flags: int = 0

    @classmethod
    def stored(
        cls, kind: Literal["compact", "contiguous"], version: int, data_offset: int | None, data_size: int
    ) -> Layout:
        """A compact or contiguous layout (the other fields at their defaults).

        Equal to ``Layout(kind, version, data_offset, data_size)``, made without the frozen
        dataclass ``__init__``, whose ten ``object.__setattr__`` calls were the largest single
        cost of opening a small dataset. Defaults are class attributes, so only four go in
        ``__dict__``.

        Example:
            >>> Layout.stored("contiguous", 3, 560, 256) == Layout("contiguous", 3, 560, 256)
            True
        """
        obj = object.__new__(cls)
        obj.__dict__.update(kind=kind, version=version, data_offset=data_offset, data_size=data_size)
        return obj


@dataclass(frozen=True)
class Attribute:
    """An attribute: its type, dataspace and raw data bytes (``data_offset`` absolute)."""

    name: str
    type: H5Type
    space: Dataspace
    data_offset: int
    data: memoryview | bytes = b""

    @classmethod
    def made(
        cls, name: str, type: H5Type, space: Dataspace, data_offset: int, data: memoryview | bytes
    ) -> Attribute:
        """``Attribute(name, type, space, data_offset, data)`` without the frozen dataclass
        ``__init__`` (see :meth:`H5Type.made`).

        Example:
            >>> t, s = H5Type(H5Class.FIXED, 1, 0, 1), Dataspace("scalar")
            >>> Attribute.made("a", t, s, 0, b"x") == Attribute("a", t, s, 0, b"x")
            True
        """
        obj = object.__new__(cls)
        d = obj.__dict__
        d["name"], d["type"], d["space"], d["data_offset"], d["data"] = name, type, space, data_offset, data
        return obj


class Message(NamedTuple):
    """An object-header message: type, flags, absolute offset and size of its body
    (``ObjectHeader.body(msg)`` gives the bytes).

    A tuple of four ints, not a frozen dataclass holding a view of the body: a file of 20,000
    arrays has over 100,000 messages, and such tuples cost least to make and, being atomic,
    drop out of the garbage collector's traversals instead of being scanned again and again.
    """

    type: int
    flags: int
    offset: int
    size: int
