"""Decoding datatype messages (HDF5 message type 3) into :class:`H5Type`.

Every class is parsed. Version-specific encodings:

* compound v1/v2: names NUL-terminated and padded to a multiple of 8, 4-byte offsets; v1 adds a
  dimension block (4 dims, permutation) per member, and a member with dimensionality > 0 is
  returned as an ARRAY type wrapping the member type;
* compound v3: names unpadded, offsets in as few bytes as the compound size needs;
* enum v1/v2 padded names, v3 unpadded; array v2 has reserved bytes and a permutation, v3 not.

**Version nibble 0.** JLD2 0.3/0.4 wrote committed datatypes whose class byte lacks the version
nibble (``0x06`` instead of ``0x36``; fixtures ``jld2testfiles/readas_*.jld2``). libhdf5 rejects
them. Their bytes are otherwise JLD2's normal version-3 layout (unpadded member names, 1/2/4-byte
offsets), and JLD2's own reader decodes every version other than 1 and 2 that way, so we treat a
version 0 like version 3 for compounds, enums and arrays. (The brief said "like version 1"; the
fixture bytes show the v3 layout, e.g. ``name\\0`` directly followed by a 1-byte offset.) The
version is kept as found on disk in :attr:`H5Type.version`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from .._errors import FormatError, LimitError, UnsupportedError
from .._limits import DEFAULT_LIMITS, Limits, datatype_depth
from ._cursor import Cursor, enc_size
from ._model import H5Class, H5Type, Member

_FIXED_PROPS = {
    H5Class.FIXED: 4,
    H5Class.BITFIELD: 4,
    H5Class.FLOAT: 12,
    H5Class.TIME: 2,
    H5Class.STRING: 0,
    H5Class.REFERENCE: 0,
}


_CLASSES = {c.value: c for c in H5Class}
_COMPOUND_ID = H5Class.COMPOUND.value
_ENUM_ID = H5Class.ENUM.value
_VLEN_ID = H5Class.VLEN.value
_OPAQUE_ID = H5Class.OPAQUE.value
_HEAD = struct.Struct("<II")  # class | version << 4 | class bit field << 8, then the size


def parse_datatype(
    c: Cursor, limits: Limits = DEFAULT_LIMITS, depth: int = 0, known: KnownCompounds | None = None
) -> H5Type:
    """Decode one datatype starting at ``c.pos``; the cursor ends just after it.

    ``known`` (one per file) remembers the compounds decoded so far by their encoding: a struct
    nested n deep holds its member structs' descriptions whole, so without it each of its n
    committed levels would decode all the levels below again (quadratic in the depth, in Python).

    Example:
        >>> from treexchange._hdf5._cursor import Cursor
        >>> raw = bytes.fromhex("3120 1f00 0400 0000 0000 2000 1708 0017 7f00 0000")
        >>> t = parse_datatype(Cursor(memoryview(raw), 0))
        >>> t.cls.name, t.size, t.numpy_dtype()
        ('FLOAT', 4, dtype('float32'))
    """
    if depth > datatype_depth(limits):
        raise LimitError(
            f"datatype nesting deeper than {datatype_depth(limits)} levels "
            f"(max_depth={limits.max_depth} + 16)",
            offset=c.pos,
        )
    start = c.pos
    buf = c.buf
    if known is not None:
        # An atomic type, or a vlen of one, met before in this file (a compound's member types
        # repeat: references, vlen strings, numbers): its bytes decide it, no decoding.
        n = _simple_length(buf, start, c.end)
        if n is not None:
            key = bytes(buf[start : start + n])
            found = known.simple.get(key)
            if found is None:
                found = parse_datatype(c, limits, depth)
                if c.pos == start + n and len(known.simple) < _SIMPLE_KEPT:
                    known.simple[key] = found
            elif depth < datatype_depth(limits):  # (its base one level deeper: within the limit)
                c.pos = start + n
            else:
                found = parse_datatype(c, limits, depth)  # raises the nesting LimitError there
            return found
    if start + 8 <= c.end:
        # The 8-byte header in one struct call: class and version, the 24-bit class bit
        # field, the size (this runs for every datatype of every committed type and attribute).
        word, size = _HEAD.unpack_from(buf, start)
        cls_id, version, flags = word & 0x0F, (word >> 4) & 0x0F, word >> 8
        if known is not None and cls_id == _COMPOUND_ID:  # (only compounds are kept there)
            found = known.find(c, depth, limits)
            if found is not None:
                return found
        c.pos = start + 8
    else:  # short: read field by field, so the error names the field that is cut off
        b0 = c.u8()
        cls_id, version = b0 & 0x0F, b0 >> 4
        flags = c.uint(3)
        size = c.u32()
    cls = _CLASSES.get(cls_id)  # (what H5Class(cls_id) gives, without the enum's call machinery)
    if cls is None:
        if cls_id == 11:
            raise UnsupportedError(
                "the HDF5 2.0 complex datatype class is not supported", offset=start
            ) from None
        raise FormatError(f"unknown datatype class {cls_id}", offset=start) from None
    props_start = c.pos
    n_props = _FIXED_PROPS.get(cls)
    # (classes compared by their numbers: an enum member looked up on its class costs more)
    if n_props is not None:
        end = props_start + n_props
        if end > c.end:
            raise c._short(n_props)
        c.pos = end
        return H5Type.made(cls, version, flags, size, bytes(buf[props_start:end]))
    if cls_id == _OPAQUE_ID:
        tag_len = flags & 0xFF
        tag = bytes(c.bytes(tag_len)).rstrip(b"\x00")
        return H5Type.made(cls, version, flags, size, bytes(buf[props_start : c.pos]), tag=tag)
    if cls_id == _COMPOUND_ID:
        members = _compound_members(c, version, flags & 0xFFFF, size, limits, depth, known)
        t = H5Type.made(cls, version, flags, size, bytes(buf[props_start : c.pos]), members=tuple(members))
        if known is not None:
            known.add(c, start, t)
        return t
    if cls_id == _ENUM_ID:
        n = flags & 0xFFFF
        base = parse_datatype(c, limits, depth + 1)
        names = []
        for _ in range(n):
            name_at = c.pos
            names.append(_decode_name(c.cstring(), name_at))
            if version in (1, 2):
                c.align(8, name_at)
        if base.size * n > c.remaining:
            raise FormatError("enum values run past the message", offset=c.pos)
        values = tuple(bytes(c.bytes(base.size)) for _ in range(n))
        return H5Type.made(
            cls,
            version,
            flags,
            size,
            bytes(buf[props_start : c.pos]),
            base=base,
            enum_names=tuple(names),
            enum_values=values,
        )
    if cls_id == _VLEN_ID:
        base = parse_datatype(c, limits, depth + 1)
        return H5Type.made(cls, version, flags, size, bytes(buf[props_start : c.pos]), base=base)
    # ARRAY
    ndims = c.u8()
    if version == 2 or version == 1:
        c.skip(3)
    dims = tuple(c.u32() for _ in range(ndims))
    if version == 2 or version == 1:
        c.skip(4 * ndims)  # permutation indices (never used by libhdf5)
    base = parse_datatype(c, limits, depth + 1)
    return H5Type.made(cls, version, flags, size, bytes(buf[props_start : c.pos]), base=base, dims=dims)


# Encoded length of the datatypes whose properties have a fixed size, by class.
_FIXED_LENGTH = {cls.value: 8 + n for cls, n in _FIXED_PROPS.items()}
_SIMPLE_KEPT = 4096  # simple types remembered per file (KnownCompounds.simple)
_NAME_WINDOW = 64  # bytes looked at for a member name's NUL at first (longer: the cursor's search)


def _simple_length(buf: memoryview, at: int, end: int) -> int | None:
    """The length of the encoding at ``buf[at:end]`` when it is an atomic datatype of a fixed
    size (numbers, strings, references, opaque) or a variable-length type of one; else None."""
    if at + 8 > end:
        return None
    cls_id = buf[at] & 0x0F
    n = _FIXED_LENGTH.get(cls_id)
    if n is None:
        if cls_id == _OPAQUE_ID:
            n = 8 + buf[at + 1]  # the tag's length: the low byte of the class bit field
        elif cls_id == _VLEN_ID and at + 16 <= end:
            base = _FIXED_LENGTH.get(buf[at + 8] & 0x0F)
            n = None if base is None else 8 + base
    return n if n is not None and at + n <= end else None


def _decode_name(raw: bytes, at: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("member name is not valid UTF-8", offset=at) from None


def _compound_members(
    c: Cursor, version: int, n: int, size: int, limits: Limits, depth: int, known: KnownCompounds | None
) -> list[Member]:
    members: list[Member] = []
    padded = version in (1, 2)
    offset_width = enc_size(size)
    buf = c.buf
    for _ in range(n):
        name_at = c.pos
        # member names are short: look for the NUL in one small copy (the cursor's search
        # widens the window when it is not there)
        head = bytes(buf[name_at : min(c.end, name_at + _NAME_WINDOW)])
        nul = head.find(b"\x00")
        if nul >= 0:
            raw = head[:nul]
            c.pos = name_at + nul + 1
        else:
            raw = c.cstring()
        name = _decode_name(raw, name_at)
        if len(name) > limits.max_name_bytes:
            raise LimitError(
                f"member name longer than max_name_bytes={limits.max_name_bytes}", offset=name_at
            )
        if padded:
            c.align(8, name_at)
            offset = c.u32()
        elif offset_width == 1 and c.pos < c.end:
            offset = buf[c.pos]
            c.pos += 1
        else:
            offset = c.uint(offset_width)
        ndims = 0
        dims: tuple[int, ...] = ()
        if version == 1:
            ndims = c.u8()
            c.skip(3 + 4 + 4)  # reserved, permutation, reserved
            raw_dims = tuple(c.u32() for _ in range(4))
            if ndims > 4:
                raise FormatError(f"compound member has {ndims} dimensions (max 4)", offset=name_at)
            dims = raw_dims[:ndims]
        mtype = parse_datatype(c, limits, depth + 1, known)
        if ndims:
            # Version-1 array members: present them as an ARRAY type, as libhdf5 does.
            count = 1
            for d in dims:
                count *= d
            mtype = H5Type(H5Class.ARRAY, 1, 0, mtype.size * count, b"", base=mtype, dims=dims)
        if offset + mtype.size > size:
            raise FormatError(
                f"compound member {name!r} (offset {offset}, size {mtype.size}) exceeds the "
                f"compound size {size}",
                offset=name_at,
            )
        members.append(Member.made(name, offset, mtype))
    return members


class KnownCompounds:
    """The compound datatypes decoded from one file, found again by their encoding.

    Keyed by the 8-byte datatype header (class, version, flags, size); a candidate is taken when
    the bytes at the cursor start with its whole encoding (a comparison in C, where decoding
    would be a Python loop over every member at every level). Only encodings of at least
    :data:`_KNOWN_MIN_BYTES` are kept (a compound of one member decodes about as fast).

    Every one kept stays (none is pushed out by later ones, so a type met again is never
    decoded again): a struct nested n deep holds its n levels' encodings, all of one header
    when the levels have one size, and its committed levels are then looked up one after the
    other. So the candidates of a header are kept in the order they were decoded and searched
    from where the last hit was, in both directions (the level met next lies next to the one
    met last: inside or around it), :data:`_KNOWN_NEAR` on each side. The memo holds at most
    :data:`_KNOWN_BYTES` of encodings and :data:`_KNOWN_PER_HEADER` per header; past those it
    stops learning, so its memory and the bytes compared per lookup stay bounded whatever a
    file claims. A hit deeper than the nesting limit allows is decoded afresh, to raise the
    same :class:`LimitError`.

    Example:
        >>> from treexchange._hdf5._cursor import Cursor
        >>> f32 = bytes.fromhex("3120 1f00 0400 0000 0000 2000 1708 0017 7f00 0000")
        >>> members = b"".join(bytes([ord("a") + i, 0, 4 * i]) + f32 for i in range(12))
        >>> raw = bytes.fromhex("360c0000 30000000") + members  # v3 compound, 12 Float32 members
        >>> known = KnownCompounds()
        >>> a = parse_datatype(Cursor(memoryview(raw), 0), known=known)
        >>> c = Cursor(memoryview(raw), 0)
        >>> b = parse_datatype(c, known=known)
        >>> a is b, c.pos == len(raw), len(b.members)
        (True, True, 12)
    """

    __slots__ = ("_by_header", "_bytes", "_last", "simple")

    def __init__(self) -> None:
        # header -> [(encoding, type)] in the order decoded; _last: where the last hit was
        self._by_header: dict[bytes, list[tuple[bytes, H5Type]]] = {}
        self._last: dict[bytes, int] = {}
        self._bytes = 0
        # atomic types and vlens of them by their whole encoding (see parse_datatype)
        self.simple: dict[bytes, H5Type] = {}

    def find(self, c: Cursor, depth: int, limits: Limits) -> H5Type | None:
        header = bytes(c.buf[c.pos : c.pos + 8])
        candidates = self._by_header.get(header)
        if not candidates:
            return None
        start, n = c.pos, len(candidates)
        last = self._last.get(header, n - 1)
        # the last hit's neighbours first, then the most recent one, then the others
        for i in _search_order(last, n):
            encoding, t = candidates[i]
            end = start + len(encoding)
            # bytes(...) copies, then compares with memcmp: a memoryview compares item by item
            if end <= c.end and bytes(c.buf[start:end]) == encoding:
                # (its nesting measured on the first hit, not when kept: most are never met again)
                if depth + _nesting(t) > datatype_depth(limits):
                    return None  # decoded afresh: raises the nesting LimitError there
                self._last[header] = i
                c.pos = end
                return t
        return None

    def add(self, c: Cursor, start: int, t: H5Type) -> None:
        n = c.pos - start
        if n < _KNOWN_MIN_BYTES or self._bytes + n > _KNOWN_BYTES:
            return
        encoding = bytes(c.buf[start : c.pos])
        candidates = self._by_header.setdefault(encoding[:8], [])
        if len(candidates) < _KNOWN_PER_HEADER:
            candidates.append((encoding, t))
            self._bytes += n


def _search_order(last: int, n: int) -> Iterator[int]:
    """Indices of ``0..n-1``, each at most once: ``last`` and its neighbours outwards up to
    :data:`_KNOWN_NEAR` away, the newest (``n - 1``) right after the first three. (Not all of
    them: a type decoded for the first time, a miss, must not cost a pass over every one kept.)"""
    yield last
    lo, hi = last - 1, last + 1
    if lo >= 0:
        yield lo
        lo -= 1
    if hi < n:
        yield hi
        hi += 1
    newest = n - 1
    if lo < newest and hi <= newest:
        yield newest
    while (lo >= 0 or hi < n) and last - lo <= _KNOWN_NEAR:
        if lo >= 0:
            yield lo
            lo -= 1
        if hi < n and hi != newest:
            yield hi
            hi += 1
        elif hi < n:
            hi += 1


_KNOWN_MIN_BYTES = 32  # (a Flux layer's NamedTuple of two references already repeats: 40 bytes)
_KNOWN_PER_HEADER = 4096
_KNOWN_NEAR = 32  # candidates looked at on either side of the last hit
_KNOWN_BYTES = 16 << 20


def _nesting(t: H5Type) -> int:
    """How many levels of datatypes ``t`` holds below itself (0 for an atomic type); cached on
    each type measured, so that each distinct member type is measured once. Iterative: ``t``
    may be nested as deep as the limit allows, on top of the parser's own recursion."""
    stack = [t]
    while stack:
        top = stack[-1]
        if "_nesting" in top.__dict__:
            stack.pop()
            continue
        inner = [m.type for m in top.members] + ([top.base] if top.base is not None else [])
        pending = [x for x in inner if "_nesting" not in x.__dict__]
        if pending:
            stack.extend(pending)
            continue
        object.__setattr__(top, "_nesting", 1 + max(x.__dict__["_nesting"] for x in inner) if inner else 0)
        stack.pop()
    return t.__dict__["_nesting"]  # type: ignore[no-any-return]
