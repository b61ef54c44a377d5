"""Byte encoders for the HDF5 structures JLD2.jl 0.6 writes (format 0.2.0).

Every function here returns ``bytes`` laid out exactly as JLD2.jl writes them (see
``docs/writing.md`` and ../shared/docs/jld2-format.md §1-§3): the 512-byte user block, superblock
version 2, object headers version 2 with their lookup3 checksums, header messages (dataspace v2,
datatype v3, fill value v3, data layout v3/v4, attribute v2, link info, group info, link,
filter pipeline v2, NIL) and v1 B-tree nodes for chunked data. Datatypes are built as
:class:`~treexchange._hdf5._model.H5Type` values (the data model the reader produces), so a type
read from a file can be written back unchanged.

Nothing here touches a file or knows about Julia values; the JLD2 write session
(:mod:`treexchange._jld2._writer`) decides *what* to write and *where*.
"""

from __future__ import annotations

import struct

from .._errors import UnsupportedError
from .._hdf5._lookup3 import lookup3
from .._hdf5._model import H5Class, H5Type, Member

UNDEFINED_ADDRESS = 0xFFFF_FFFF_FFFF_FFFF
"""HDF5's "undefined address" (all bits set)."""

FILE_HEADER_LENGTH = 512
"""Size of the user block that holds the JLD2 header text; also the HDF5 base address."""

SUPERBLOCK_SIZE = 48
DATA_START = FILE_HEADER_LENGTH + SUPERBLOCK_SIZE
"""Absolute offset of the first object JLD2 writes (just after the superblock)."""

REQUIRED_FILE_HEADER = "HDF5-based Julia Data Format, version "
FORMAT_VERSION = "0.2.0"
DEFAULT_PRODUCER = " (treexchange 64-bit LE)"

CONTINUATION_PLACEHOLDER_SIZE = 20
"""A 16-byte NIL message (+4 header bytes) JLD2 reserves in every dataset and group header."""

# Header message types (HDF5 spec IV.A.2).
MSG_NIL = 0x00
MSG_DATASPACE = 0x01
MSG_LINK_INFO = 0x02
MSG_DATATYPE = 0x03
MSG_FILL_VALUE = 0x05
MSG_LINK = 0x06
MSG_LAYOUT = 0x08
MSG_GROUP_INFO = 0x0A
MSG_FILTER_PIPELINE = 0x0B
MSG_ATTRIBUTE = 0x0C

DATATYPE_MSG_FLAGS_COMMITTED_OBJECT = 0x40
"""Flags of the datatype message inside a committed (named) datatype object."""

_V3 = 3  # datatype message version JLD2 writes for every class


# --- datatypes --------------------------------------------------------------------------------


def fixed_type(size: int, signed: bool) -> H5Type:
    """Integer type as JLD2 writes it (little endian, offset 0, full precision).

    Example:
        >>> encode_datatype(fixed_type(8, True)).hex()
        '300800000800000000004000'
    """
    return H5Type(H5Class.FIXED, _V3, 0x08 if signed else 0x00, size, props=struct.pack("<HH", 0, 8 * size))


def bitfield_type(size: int = 1) -> H5Type:
    """Bitfield type: how JLD2 stores ``Bool`` (bytes 0x00/0x01)."""
    return H5Type(H5Class.BITFIELD, _V3, 0, size, props=struct.pack("<HH", 0, 8 * size))


_FLOAT_LAYOUTS = {
    # size: (bitfield byte 2, exponent location, exponent size, mantissa location, mantissa size, bias)
    2: (0x0F, 10, 5, 0, 10, 15),
    4: (0x1F, 23, 8, 0, 23, 127),
    8: (0x3F, 52, 11, 0, 52, 1023),
}


def float_type(size: int) -> H5Type:
    """IEEE float type (Float16/32/64) with JLD2's exact class bit field."""
    bf2, eloc, esize, mloc, msize, bias = _FLOAT_LAYOUTS[size]
    props = struct.pack("<HHBBBBI", 0, 8 * size, eloc, esize, mloc, msize, bias)
    return H5Type(H5Class.FLOAT, _V3, 0x20 | (bf2 << 8), size, props=props)


def opaque_type(size: int) -> H5Type:
    """Opaque type with an empty tag (JLD2's encoding of primitive bits types and ghosts)."""
    return H5Type(H5Class.OPAQUE, _V3, 0, size)


def reference_type() -> H5Type:
    """Old-style 8-byte object reference."""
    return H5Type(H5Class.REFERENCE, _V3, 0, 8)


def fixed_string_type(nbytes: int) -> H5Type:
    """Fixed-length UTF-8, NULL-padded string: a top-level ``String`` of ``nbytes`` bytes."""
    return H5Type(H5Class.STRING, _V3, 0x11, nbytes)


def vlen_type(base: H5Type) -> H5Type:
    """Variable-length sequence of ``base`` (16-byte elements: count, heap address, index)."""
    return H5Type(H5Class.VLEN, _V3, 0, 16, base=base)


VLEN_UTF8 = H5Type(H5Class.VLEN, _V3, 0x11 | (0x01 << 8), 16, base=fixed_type(1, False))
"""JLD2's ``H5TYPE_VLEN_UTF8``: strings inside structs and arrays, and ``Core.Symbol``."""

REFERENCE = reference_type()

H5TYPE_DATATYPE = H5Type(
    H5Class.COMPOUND,
    _V3,
    2,
    32,
    members=(Member("name", 0, VLEN_UTF8), Member("parameters", 16, vlen_type(REFERENCE))),
)
"""The bootstrap ``Core.DataType`` compound JLD2 requires byte for byte (format §4.1)."""

H5TYPE_UNION = H5Type(
    H5Class.COMPOUND,
    _V3,
    3,
    48,
    members=(
        Member("description", 0, VLEN_UTF8),
        Member("datatype", 16, vlen_type(REFERENCE)),
        Member("unionall", 32, vlen_type(REFERENCE)),
    ),
)
"""JLD2's ``H5TYPE_UNION``: a ``Union`` value as a description, its DataType members and its
UnionAll members (src/data/writing_datatypes.jl)."""


def compound_type(members: list[tuple[str, H5Type]]) -> H5Type:
    """A packed compound: member offsets are the running sum of the member sizes (JLD2's ODR)."""
    out: list[Member] = []
    offset = 0
    for name, mtype in members:
        out.append(Member(name, offset, mtype))
        offset += mtype.size
    return H5Type(H5Class.COMPOUND, _V3, len(out), offset, members=tuple(out))


def encode_datatype(t: H5Type) -> bytes:
    """The datatype message body for ``t`` (class/version byte, 24-bit bit field, size, properties).

    Example:
        >>> encode_datatype(VLEN_UTF8).hex()
        '3911010010000000300000000100000000000800'
    """
    # Kept on the type object itself, not in a cache keyed by equality: a compound holds its
    # members' types whole, and looking up a fresh copy of a nested struct's type (the one the
    # reader decoded, or a previous save's) compared it with the kept one down to the bottom at
    # each of its levels: quadratic in the depth. A fresh copy costs one pass over its members,
    # whose own encodings are kept on them.
    encoded: bytes | None = t.__dict__.get("_encoded")
    if encoded is None:
        encoded = _encode_datatype(t)
        object.__setattr__(t, "_encoded", encoded)
    return encoded


def _encode_datatype(t: H5Type) -> bytes:
    head = struct.pack(
        "<BBBBI",
        (t.version << 4) | int(t.cls),
        t.flags & 0xFF,
        (t.flags >> 8) & 0xFF,
        (t.flags >> 16) & 0xFF,
        t.size,
    )
    if t.cls == H5Class.COMPOUND:
        parts = [head]
        width = 1 if t.size <= 0xFF else 2 if t.size <= 0xFFFF else 4
        for m in t.members:
            parts.append(m.name.encode("utf-8") + b"\x00")
            parts.append(m.offset.to_bytes(width, "little"))
            parts.append(encode_datatype(m.type))
        return b"".join(parts)
    if t.cls == H5Class.VLEN:
        if t.base is None:
            raise UnsupportedError("variable-length datatype without a base type")
        return head + encode_datatype(t.base)
    if t.cls == H5Class.OPAQUE:
        return head + t.tag
    if t.cls in (H5Class.FIXED, H5Class.FLOAT, H5Class.BITFIELD, H5Class.STRING, H5Class.REFERENCE):
        return head + t.props
    raise UnsupportedError(f"writing HDF5 datatype class {t.cls.name} is not supported")


def datatype_size(t: H5Type) -> int:
    """Encoded size of ``t`` in bytes (``jlsizeof`` of the datatype)."""
    return len(encode_datatype(t))


SHARED_DATATYPE_SIZE = 10
"""Size of a shared datatype reference: version 3, type 2, 8-byte address."""


def encode_shared_datatype(address: int) -> bytes:
    """A shared (committed) datatype reference: ``03 02`` + relative address."""
    return struct.pack("<BBQ", 3, 2, address)


# --- header messages ---------------------------------------------------------------------------


def message(mtype: int, body: bytes, flags: int = 0) -> bytes:
    """One version-2 object-header message: type u8, body size u16, flags u8, body (no padding).

    HDF5 limits a message to 65535 bytes; JLD2 hits the same limit (e.g. a struct or NamedTuple
    with thousands of fields has too large a compound datatype).
    """
    if len(body) > 0xFFFF:
        raise UnsupportedError(
            f"an HDF5 header message would be {len(body)} bytes (the format allows 65535): "
            "too many fields in one struct/NamedTuple, or too long a name"
        )
    return struct.pack("<BHB", mtype, len(body), flags) + body


def nil_message(payload: int) -> bytes:
    """A NIL message with ``payload`` zero bytes (free space inside a header)."""
    return struct.pack("<BHB", MSG_NIL, payload, 0) + bytes(payload)


CONTINUATION_PLACEHOLDER = nil_message(16)

FILL_VALUE_MESSAGE = message(MSG_FILL_VALUE, b"\x03\x09")
"""Fill value v3, flags 0x09 (allocation early, write time "if set", no value): JLD2's constant."""

DS_SCALAR = 0
DS_SIMPLE = 1
DS_NULL = 2


def dataspace_body(kind: int, dims: tuple[int, ...] | list[int]) -> bytes:
    """Dataspace v2 body: version, rank, flags 0, type, then u64 dims (HDF5 order)."""
    return struct.pack("<BBBB", 2, len(dims), 0, kind) + b"".join(struct.pack("<Q", d) for d in dims)


def dataspace_size(ndims: int) -> int:
    return 4 + 8 * ndims


def layout_compact(data: bytes) -> bytes:
    """Data layout v4, compact: the data lives in the header."""
    return message(MSG_LAYOUT, struct.pack("<BBH", 4, 0, len(data)) + data)


LAYOUT_CONTIGUOUS_SIZE = 4 + 18


def layout_contiguous(address: int, size: int) -> bytes:
    """Data layout v4, contiguous: relative address and byte size of the data."""
    return message(MSG_LAYOUT, struct.pack("<BBQQ", 4, 1, address, size))


def layout_chunked_v3_size(ndims: int) -> int:
    return 4 + 3 + 8 + 4 * ndims


def layout_chunked_v3(btree_address: int, chunk_dims: tuple[int, ...]) -> bytes:
    """Data layout v3, chunked, indexed by a v1 B-tree.

    ``chunk_dims`` are in HDF5 order and end with the element size (rank + 1 entries), each
    stored as u32. Both libhdf5 2.x and JLD2.jl read this layout (JLD2: ``read_v1btree_dataset_chunks``).
    """
    body = struct.pack("<BBBQ", 3, 2, len(chunk_dims), btree_address)
    body += b"".join(struct.pack("<I", d) for d in chunk_dims)
    return message(MSG_LAYOUT, body)


def chunk_dim_width(chunk_dims: tuple[int, ...]) -> int:
    """Bytes per chunk dimension in a layout v4 message, as libhdf5 computes it (and checks on
    read since 2.0): ``floor(log2(max dim)) // 8 + 1``.

    JLD2.jl writes a fixed 8 here, which libhdf5 >= 2.0 refuses; JLD2 itself reads any width of
    1, 2, 4 or 8 bytes.

    Example:
        >>> chunk_dim_width((255, 4)), chunk_dim_width((256, 4)), chunk_dim_width((70000, 8))
        (1, 2, 3)
    """
    return (max(max(chunk_dims), 1).bit_length() - 1) // 8 + 1


def layout_single_chunk_size(ndims_plus_one: int, width: int) -> int:
    return 4 + 5 + width * ndims_plus_one + 1 + 8 + 4 + 8


def layout_single_chunk(
    chunk_dims: tuple[int, ...], filtered_size: int, address: int, width: int | None = None
) -> bytes:
    """Data layout v4, chunked, single-chunk index with a filtered chunk (flags 2), as JLD2.jl
    writes it for compressed arrays -- with libhdf5's dimension-size width unless ``width``
    says otherwise (JLD2's own is 8, which libhdf5 >= 2.0 refuses).

    ``chunk_dims`` are the dataset dims in HDF5 order plus the element size.
    """
    if width is None:
        width = chunk_dim_width(chunk_dims)
    body = struct.pack("<BBBBB", 4, 2, 2, len(chunk_dims), width)
    body += b"".join(d.to_bytes(width, "little") for d in chunk_dims)
    body += struct.pack("<BQIQ", 1, filtered_size, 0, address)
    return message(MSG_LAYOUT, body)


def filter_pipeline(filters: list[tuple[int, str, tuple[int, ...]]]) -> bytes:
    """Filter pipeline message version 2, as JLD2.jl writes it.

    Each filter is ``(id, name, client_values)``; ids > 255 carry their name, NUL-terminated and
    padded to a multiple of 8 bytes. Flags are 0 (mandatory filter).
    """
    body = bytearray(struct.pack("<BB", 2, len(filters)))
    for fid, name, client in filters:
        if fid > 255:
            raw = name.encode("ascii") + b"\x00"
            raw += bytes(-len(raw) % 8)
            body += struct.pack("<HHHH", fid, len(raw), 0, len(client)) + raw
        else:
            body += struct.pack("<HHH", fid, 0, len(client))
        body += b"".join(struct.pack("<I", v) for v in client)
    return message(MSG_FILTER_PIPELINE, bytes(body))


def attribute_message(
    name: str,
    datatype: H5Type | int,
    space_kind: int,
    dims: tuple[int, ...] | list[int],
    data: bytes,
) -> bytes:
    """An attribute message, version 2 (no padding). ``datatype`` is an H5Type, or the relative
    address of a committed datatype (then the attribute's type is shared, flags 1)."""
    raw_name = name.encode("utf-8") + b"\x00"
    if isinstance(datatype, int):
        dt = encode_shared_datatype(datatype)
        flags = 1
    else:
        dt = encode_datatype(datatype)
        flags = 0
    ds = dataspace_body(space_kind, dims)
    body = struct.pack("<BBHHH", 2, flags, len(raw_name), len(dt), len(ds)) + raw_name + dt + ds + data
    return message(MSG_ATTRIBUTE, body)


def attribute_message_size(name: str, datatype_nbytes: int, ndims: int, data_nbytes: int) -> int:
    """Size of :func:`attribute_message` output (4-byte message header included)."""
    return 4 + 8 + len(name.encode("utf-8")) + 1 + datatype_nbytes + dataspace_size(ndims) + data_nbytes


LINK_INFO_MESSAGE = message(MSG_LINK_INFO, struct.pack("<BBQQ", 0, 0, UNDEFINED_ADDRESS, UNDEFINED_ADDRESS))
GROUP_INFO_MESSAGE = message(MSG_GROUP_INFO, b"\x00\x00")


def link_message(name: str, target: int) -> bytes:
    """A hard link, version 1, UTF-8 name (charset byte present), 1- or 2-byte name length."""
    raw = name.encode("utf-8")
    width_flag = 0 if len(raw) <= 0xFF else 1 if len(raw) <= 0xFFFF else 2
    width = 1 << width_flag
    body = struct.pack("<BBB", 1, 0x10 | width_flag, 1) + len(raw).to_bytes(width, "little") + raw
    return message(MSG_LINK, body + struct.pack("<Q", target))


def link_message_size(name: str) -> int:
    n = len(name.encode("utf-8"))
    width = 1 if n <= 0xFF else 2 if n <= 0xFFFF else 4
    return 4 + 3 + width + n + 8


# --- object headers ----------------------------------------------------------------------------


def size_width(n: int) -> int:
    """Bytes JLD2 uses for a size field holding ``n`` (1, 2, 4 or 8: ``size_size``)."""
    return 1 if n <= 0xFF else 2 if n <= 0xFFFF else 4 if n <= 0xFFFF_FFFF else 8


def object_header_size(payload: int) -> int:
    """Total bytes of a v2 object header with ``payload`` message bytes, checksum included."""
    return 6 + size_width(payload) + payload + 4


def object_header(payload: bytes) -> bytes:
    """A version-2 object header (``OHDR``) around the given message bytes, with its checksum.

    The flags byte holds only the width of the chunk-size field (no times, no creation order).

    Example:
        >>> h = object_header(nil_message(4))
        >>> h[:6], len(h) == object_header_size(8)
        (b'OHDR\\x02\\x00', True)
    """
    head = object_header_unsummed(payload)
    return head + struct.pack("<I", lookup3(head))


def object_header_unsummed(payload: bytes) -> bytes:
    """:func:`object_header` without its last 4 bytes, the checksum (for the writer, which
    computes many checksums at once: ``Sink.put_checksummed``)."""
    n = len(payload)
    width = size_width(n)
    flag = {1: 0, 2: 1, 4: 2, 8: 3}[width]
    return b"OHDR" + bytes((2, flag)) + n.to_bytes(width, "little") + payload


# --- global heap, B-tree, superblock, user block ------------------------------------------------


def global_heap_header(collection_size: int) -> bytes:
    """``GCOL`` header, version 1. JLD2 stores the collection size *without* these 16 bytes."""
    return b"GCOL" + struct.pack("<B3xQ", 1, collection_size)


def global_heap_object(index: int, nbytes: int) -> bytes:
    """Header of one heap object: index, reference count 1, reserved, size."""
    return struct.pack("<HHIQ", index, 1, 0, nbytes)


BTREE_CHUNK_K = 32
"""libhdf5's default indexed-storage B-tree K (superblock v2 without an extension): at most
2K = 64 children per node."""


def btree_node_size(ndims_plus_one: int) -> int:
    """Bytes of one v1 B-tree node for raw-data chunks (always allocated for 2K entries)."""
    key = 8 + 8 * ndims_plus_one
    return 24 + (2 * BTREE_CHUNK_K + 1) * key + 2 * BTREE_CHUNK_K * 8


def btree_node(
    level: int,
    keys: list[tuple[int, int, tuple[int, ...]]],
    children: list[int],
    ndims_plus_one: int,
) -> bytes:
    """A v1 B-tree node of type 1 (raw data chunks), padded to the full node size.

    ``keys`` holds ``len(children) + 1`` entries of (chunk size in bytes, filter mask, chunk
    offset in elements per HDF5 dimension, element-size dimension included as 0).
    """
    out = bytearray(
        b"TREE" + struct.pack("<BBHQQ", 1, level, len(children), UNDEFINED_ADDRESS, UNDEFINED_ADDRESS)
    )
    for i, child in enumerate(children):
        size, mask, offs = keys[i]
        out += struct.pack("<II", size, mask) + b"".join(struct.pack("<Q", o) for o in offs)
        out += struct.pack("<Q", child)
    size, mask, offs = keys[len(children)]
    out += struct.pack("<II", size, mask) + b"".join(struct.pack("<Q", o) for o in offs)
    total = btree_node_size(ndims_plus_one)
    out += bytes(total - len(out))
    return bytes(out)


def superblock_v2(base: int, end_of_file: int, root_address: int) -> bytes:
    """Superblock version 2 with 8-byte offsets and lengths and its lookup3 checksum.

    Like JLD2, ``end_of_file`` is the *absolute* file length (libhdf5 accepts it).
    """
    body = b"\x89HDF\r\n\x1a\n" + struct.pack(
        "<BBBBQQQQ", 2, 8, 8, 0, base, UNDEFINED_ADDRESS, end_of_file, root_address
    )
    return body + struct.pack("<I", lookup3(body))


def user_block(producer: str = DEFAULT_PRODUCER, format_version: str = FORMAT_VERSION) -> bytes:
    """The 512-byte user block: JLD2's header text, NUL, the producer note, NUL, zeros.

    Example:
        >>> user_block(" (Julia 1.11.1 64-bit LE)")[:44]
        b'HDF5-based Julia Data Format, version 0.2.0\\x00'
    """
    text = (REQUIRED_FILE_HEADER + format_version).encode("utf-8") + b"\x00"
    text += producer.encode("utf-8") + b"\x00"
    if len(text) > FILE_HEADER_LENGTH:
        raise UnsupportedError(f"producer note too long ({len(text)} bytes; the user block holds 512)")
    return text + bytes(FILE_HEADER_LENGTH - len(text))
