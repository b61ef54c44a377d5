"""Finding and decoding the HDF5 superblock (versions 0, 1, 2 and 3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._errors import FormatError, UnsupportedError, WrongFormatError
from ._cursor import Cursor
from ._lookup3 import lookup3

SIGNATURE = b"\x89HDF\r\n\x1a\n"


@dataclass(frozen=True)
class Superblock:
    """What the reader needs from the superblock.

    ``base`` is the absolute offset every address is relative to. Like libhdf5, we take it to be
    the superblock's own offset whatever the stored base address says (libhdf5 "adjusts" a
    mismatching base the same way), which is 512 for every JLD2 file.
    """

    offset: int
    version: int
    offset_size: int
    length_size: int
    base: int
    stored_base: int
    eof_address: int | None
    root_address: int
    extension_address: int | None = None
    group_leaf_k: int = 4
    group_internal_k: int = 16
    root_btree_address: int | None = None  # v0/v1: cached symbol table of the root entry
    root_heap_address: int | None = None


def find_superblock(buf: memoryview) -> int:
    """Absolute offset of the superblock signature: 0, 512, 1024, 2048, ... (HDF5's search rule).

    Example:
        >>> find_superblock(memoryview(bytes(512) + SIGNATURE + bytes(40)))
        512
    """
    size = len(buf)
    pos = 0
    while pos + len(SIGNATURE) <= size:
        if bytes(buf[pos : pos + len(SIGNATURE)]) == SIGNATURE:
            return pos
        pos = 512 if pos == 0 else pos * 2
    known = _known_other_format(bytes(buf[:64]), size)
    raise WrongFormatError(
        "not an HDF5 file (no superblock signature found), nor a BSON file" + (f": {known}" if known else ""),
        offset=0,
    )


def _known_other_format(head: bytes, size: int) -> str | None:
    """What a file that is neither HDF5 nor BSON seems to be, from its first bytes and its size
    (for the error): formats Julia model files are often mistaken for, named by their own magic
    bytes, and model files a text tool altered."""
    if head.startswith(b"7JL"):
        return (
            "it is a Julia Serialization stream (Serialization.serialize, e.g. MLJ's MLJ.save), a format "
            "tied to the Julia version that wrote it, which treexchange does not read"
        )
    if head.lstrip(b"\r\n").startswith(b"HDF5-based Julia Data Format") and not head.startswith(b"HDF5"):
        return (
            "it is a JLD2 file whose bytes were altered as text (line endings converted, e.g. by git's "
            "autocrlf): the original file is needed"
        )
    if len(head) >= 5 and b"\x00" not in head and 1 <= head[4] <= 0x13:
        # A BSON document starts with its length (int32, little-endian): with its zero bytes
        # turned to spaces (0x20) it still gives the file's size where the spaces are zeros
        if int.from_bytes(head[:4].replace(b" ", b"\x00"), "little") == size:
            return (
                "it is a BSON file whose zero bytes were replaced by spaces (0x20), as a text tool "
                "does: the original file is needed"
            )
    if head.startswith(b"version https://git-lfs"):
        return "it is a Git LFS pointer, not the file itself (run git lfs pull)"
    if head and not head.strip(b"\x00"):
        return "it begins with zero bytes only (no header): a file never written, or cut short"
    text = _printable_text(head, size)
    if text is not None:
        # JSON or CSV saved under a model's name, an HTML page downloaded in the file's place, a
        # symbolic link git stored as its target's path: what it begins with says which
        shown = text if len(text) <= 40 else text[:40] + "..."
        return f"it is text, not a binary file (it begins {shown!r})"
    return None


def _printable_text(head: bytes, size: int) -> str | None:
    """``head`` as text if it is printable UTF-8, else None; when the file goes on past ``head``,
    a multi-byte character the cut split (up to 3 bytes of 0x80 and above) is left out."""
    cuts = range(4) if size > len(head) else range(1)
    for cut in cuts:
        if cut and head[-cut] < 0x80:
            break
        try:
            text = head[: len(head) - cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return text if text and all(c.isprintable() or c in "\t\r\n" for c in text) else None
    return None


def read_superblock(buf: memoryview, *, verify_checksum: bool = False) -> Superblock:
    """Locate and decode the superblock.

    Example:
        >>> import struct
        >>> from treexchange._hdf5._lookup3 import lookup3
        >>> body = SIGNATURE + bytes([2, 8, 8, 0]) + struct.pack("<QqQQ", 0, -1, 100, 48)
        >>> sb = read_superblock(memoryview(body + struct.pack("<I", lookup3(body))))
        >>> sb.version, sb.base, sb.root_address
        (2, 0, 48)
    """
    start = find_superblock(buf)
    c = Cursor(buf, start + len(SIGNATURE))
    version = c.u8()
    if version in (0, 1):
        return _read_v0_v1(c, start, version)
    if version in (2, 3):
        offset_size = _sizes(c)
        c.u8()  # file consistency flags
        stored_base = c.uint(offset_size)
        ext = c.address()
        eof = c.address()
        root = c.address()
        body_end = c.pos
        stored = c.u32()
        if verify_checksum and lookup3(buf[start:body_end]) != stored:
            raise FormatError("superblock checksum mismatch", offset=body_end)
        return _superblock(c, start, version, stored_base, eof, root, body_end, extension_address=ext)
    raise UnsupportedError(f"HDF5 superblock version {version} is not supported", offset=c.pos - 1)


def _sizes(c: Cursor) -> int:
    """The sizes of offsets and lengths (a byte each), checked and set on ``c`` for what follows;
    the size of offsets."""
    offset_size, length_size = c.u8(), c.u8()
    if offset_size not in (2, 4, 8) or length_size not in (2, 4, 8):
        raise FormatError(
            f"unsupported size of offsets/lengths ({offset_size}/{length_size}); expected 2, 4 or 8",
            offset=c.pos - 2,
        )
    c.offset_size, c.length_size = offset_size, length_size
    return offset_size


def _superblock(
    c: Cursor,
    start: int,
    version: int,
    stored_base: int,
    eof: int | None,
    root: int | None,
    after_root: int,
    **more: Any,
) -> Superblock:
    """The superblock at ``start`` (every version's fields, then ``more``); the root group's
    address, read just before ``after_root``, must be defined."""
    if root is None:
        raise FormatError("superblock has no root group address", offset=after_root - c.offset_size)
    return Superblock(
        offset=start,
        version=version,
        offset_size=c.offset_size,
        length_size=c.length_size,
        base=start,
        stored_base=stored_base,
        eof_address=eof,
        root_address=root,
        **more,
    )


def _read_v0_v1(c: Cursor, start: int, version: int) -> Superblock:
    c.u8()  # free-space storage version
    c.u8()  # root group symbol table entry version
    c.u8()  # reserved
    c.u8()  # shared header message format version
    offset_size = _sizes(c)
    c.u8()  # reserved
    leaf_k = c.u16()
    internal_k = c.u16()
    c.u32()  # file consistency flags
    if version == 1:
        c.u16()  # indexed storage internal node K
        c.u16()  # reserved
    stored_base = c.uint(offset_size)
    c.address()  # free-space info (always undefined in practice)
    eof = c.address()
    c.address()  # driver information block
    # Root group symbol table entry: name offset, object header address, cache type, reserved,
    # scratch pad (B-tree + local heap addresses when cache type is 1).
    c.address()
    root = c.address()
    after_root = c.pos
    cache_type = c.u32()
    c.u32()
    scratch = c.sub(16)
    btree = heap = None
    if cache_type == 1:
        btree = scratch.address()
        heap = scratch.address()
    return _superblock(
        c,
        start,
        version,
        stored_base,
        eof,
        root,
        after_root,
        group_leaf_k=leaf_k,
        group_internal_k=internal_k,
        root_btree_address=btree,
        root_heap_address=heap,
    )
