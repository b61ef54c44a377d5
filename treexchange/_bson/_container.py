"""The BSON container (bsonspec.org), parsed by a small bounded parser over the file's bytes.

Why our own parser and not a BSON library: BSON.jl files are read for their arrays, which are
BSON *binary* elements holding raw column-major bytes; a library decodes every binary into a
Python ``bytes`` copy (pymongo's C decoder does), while this parser hands out their byte ranges
(:class:`Blob`) so that the Julia layer makes zero-copy numpy views of the memory map. It also
checks every length against the enclosing document and the file (a library trusts them up to
its own limits), reports the absolute byte offset and the key path of what it refuses, bounds
the nesting without recursion (an explicit stack), and knows only the element types BSON.jl
writes. Nothing is evaluated: BSON's JavaScript elements are refused with the other kinds
BSON.jl never writes.

What a parse gives (the *raw tree*): documents as :class:`Doc` (a ``dict`` of key -> raw value,
with the document's offset), arrays as :class:`Seq` (a ``list``; BSON array keys ``"0"``,
``"1"``... are not checked, as BSON.jl does not check them), binaries as :class:`Blob`, strings
as ``str``, int32 / int64 / double as ``numpy`` scalars of that width, booleans as ``bool`` and
null as ``None``; type documents as :class:`Lazy` (one object per distinct content). Parts of a
raw tree may be shared with other places of the file whose bytes are the same (see
:meth:`Parser.value`): raw trees are never changed once made.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from .._errors import FormatError, LimitError, TreePath, UnsupportedError
from .._limits import Limits

DOUBLE, STRING, DOCUMENT, ARRAY, BINARY, BOOLEAN, NULL, INT32, INT64 = (
    0x01,
    0x02,
    0x03,
    0x04,
    0x05,
    0x08,
    0x0A,
    0x10,
    0x12,
)
_FIXED = {DOUBLE: 8, BOOLEAN: 1, NULL: 0, INT32: 4, INT64: 8}
_NAMES = {
    0x06: "undefined",
    0x07: "ObjectId",
    0x09: "UTC datetime",
    0x0B: "regular expression",
    0x0C: "DBPointer",
    0x0D: "JavaScript code",
    0x0E: "symbol",
    0x0F: "JavaScript code with scope",
    0x11: "timestamp",
    0x13: "decimal128",
    0x7F: "max key",
    0xFF: "min key",
}
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")


class Doc(dict):  # type: ignore[type-arg]
    """A BSON document: key -> raw value, in file order; ``offset`` is where it starts (set by
    the parser: no ``__init__`` of our own, so making one costs what a ``dict`` costs)."""

    __slots__ = ("offset",)
    offset: int


class Seq(list):  # type: ignore[type-arg]
    """A BSON array: its raw values in order; ``offset`` is where it starts (see :class:`Doc`)."""

    __slots__ = ("offset",)
    offset: int


class Blob:
    """A BSON binary element's bytes, by position in the file (``offset``, ``length``)."""

    __slots__ = ("length", "offset")

    def __init__(self, offset: int, length: int) -> None:
        self.offset = offset
        self.length = length

    def __repr__(self) -> str:
        return f"Blob(offset={self.offset}, length={self.length})"


LAZY_MAX_BYTES = 64 << 10
"""Documents up to this size where BSON.jl writes types (under a ``type`` key, in a ``params``
array) are left :class:`Lazy`, one per distinct content (see :class:`Parser`): a layer's type
repeats at every layer (and inside its parent's type), and is a few hundred bytes (a closure's,
with its compiled code, some kilobytes)."""


class Lazy:
    """A type document left unparsed: one object for all the documents of the same bytes
    (BSON.jl repeats a layer's type at every layer), its ``tree`` parsed when first read
    (:meth:`Parser.materialize`); ``offset`` and ``end`` are the first one's."""

    __slots__ = ("end", "etype", "offset", "tree")

    def __init__(self, etype: int, offset: int, end: int) -> None:
        self.etype = etype
        self.offset = offset
        self.end = end
        self.tree: Any = None


MAX_HOLES = 16
"""A document with at most this many binaries (a layer: its weight and bias), at most
:data:`MAX_HOLE_DEPTH` levels of documents and :data:`MAX_TEMPLATE_ELEMENTS` elements (the
documents left Lazy not counted) can serve as a :class:`_Template`."""
MAX_HOLE_DEPTH = 6
MAX_TEMPLATE_ELEMENTS = 4096
MAX_TEMPLATES_PER_LENGTH = 4

Hole = tuple[tuple[str | int, ...], int, int]
"""A binary inside a document: the keys down to it, its payload's offset, its length."""


class _Template:
    """A parsed document holding binaries (a layer's weights), kept as a pattern: another
    document of the same length whose bytes agree outside those binaries' payloads parses to the
    same tree with the binaries moved (the documents leading to them copied, the rest shared).

    ``segments`` are the bytes between the payloads (offsets relative to the document's start),
    ``holes`` the binaries (their payload offsets relative too)."""

    __slots__ = ("etype", "height", "holes", "segments", "start", "tree")

    def __init__(
        self, tree: Doc | Seq, start: int, segments: list[tuple[int, bytes]], holes: list[Hole], height: int
    ) -> None:
        self.tree = tree
        self.start = start
        self.segments = segments
        self.holes = holes
        self.height = height

    def matches(self, buf: Any, off: int) -> bool:
        """Whether the document at ``off`` (of the template's length) agrees outside the holes."""
        for rel, seg in self.segments:
            if buf[off + rel : off + rel + len(seg)] != seg:
                return False
        return True

    def at(self, off: int) -> Doc | Seq:
        """The tree of the matching document at ``off``."""
        shift = off - self.start
        root = _copy(self.tree, shift)
        copies: dict[int, Doc | Seq] = {id(self.tree): root}
        for path, rel, length in self.holes:
            original: Any = self.tree
            node: Any = root
            for k in path[:-1]:
                original = original[k]
                made = copies.get(id(original))
                if made is None:
                    made = copies[id(original)] = _copy(original, shift)
                    node[k] = made
                node = made
            node[path[-1]] = Blob(off + rel, length)
        return root


def _holes(tree: Doc | Seq) -> tuple[list[Hole], int] | None:
    """The binaries in ``tree`` (absolute offsets) and its height in documents (Lazy ones not
    counted); None if the tree is too large to serve as a template: more than
    :data:`MAX_HOLES` binaries, more than :data:`MAX_HOLE_DEPTH` levels or
    :data:`MAX_TEMPLATE_ELEMENTS` elements."""
    holes: list[Hole] = []
    height = 0
    elements = 0
    todo: list[tuple[Any, tuple[str | int, ...]]] = [(tree, ())]
    while todo:
        node, keys = todo.pop()
        if len(keys) >= MAX_HOLE_DEPTH:
            return None
        height = max(height, len(keys) + 1)
        elements += len(node)
        if elements > MAX_TEMPLATE_ELEMENTS:
            return None
        for k, x in node.items() if type(node) is Doc else enumerate(node):
            kind = type(x)
            if kind is Blob:
                if len(holes) == MAX_HOLES:
                    return None
                holes.append(((*keys, k), x.offset, x.length))
            elif kind is Doc or kind is Seq:
                todo.append((x, (*keys, k)))
    return holes, height


def _copy(container: Doc | Seq, shift: int) -> Doc | Seq:
    made = Doc(container) if type(container) is Doc else Seq(container)
    made.offset = container.offset + shift
    return made


def looks_like_bson(head: bytes, size: int, last: int) -> bool:
    """Whether a file starts as a BSON document does: its first four bytes are the document's
    length (little-endian int32), equal to the file size, and its last byte is 0.

    Example:
        >>> looks_like_bson(b"\\x05\\x00\\x00\\x00", 5, 0), looks_like_bson(b"\\x89HDF", 5, 0)
        (True, False)
    """
    return size >= 5 and len(head) >= 4 and _I32.unpack_from(head)[0] == size and last == 0


def bson_depth(limits: Limits) -> int:
    """How deep BSON documents may nest: ``4 * max_depth + 48``. A Julia value takes two BSON
    levels (the tagged document and its ``data`` array), and so does each level of its type's
    parameters, which nest about twice as deep as the value (see ``_limits.type_depth``)."""
    return 4 * limits.max_depth + 48


class Parser:
    """Parses the raw tree of a BSON buffer (``bytes``, ``mmap``, ``memoryview``), bounded by
    ``limits``; every error names the absolute offset and the key path (``where`` prefixes it)."""

    def __init__(self, buf: Any, limits: Limits) -> None:
        self.buf = buf
        self.size = len(buf)
        self.limits = limits
        self.max_depth = bson_depth(limits)
        self._find = buf.find  # bytes, bytearray and mmap all have it
        # The memos of value(): a type document's bytes -> its Lazy; a document length -> the
        # last document parsed of that length with binaries; the bytes they may hash or keep.
        self._memo: dict[bytes, Lazy] = {}
        self._templates: dict[int, _Template] = {}
        # length of a document with binaries -> templates made of that length (0: one seen, none made)
        self._lengths: dict[int, int] = {}
        self._budget = self.size + (1 << 20)

    # --- pieces ----------------------------------------------------------------------------
    def _error(self, what: str, offset: int, path: TreePath) -> FormatError:
        return FormatError(f"BSON: {what}", offset=offset, path=path)

    def doc_bounds(self, off: int, end: int, path: TreePath) -> int:
        """The end of the document or array starting at ``off`` (which must end by ``end``)."""
        if off + 5 > end:
            raise self._error("document truncated (no room for its length)", off, path)
        length = _I32.unpack_from(self.buf, off)[0]
        if length < 5 or length > end - off:
            raise self._error(f"document length {length} out of range (at most {end - off})", off, path)
        stop = off + length
        if self.buf[stop - 1] != 0:
            raise self._error("document does not end with a 0 byte", stop - 1, path)
        return stop

    def _key(self, off: int, stop: int, path: TreePath) -> tuple[str, int]:
        """The element name (a C string) at ``off``; returns it and the offset after its 0."""
        nul = self._find(b"\x00", off, stop)
        if nul < 0:
            raise self._error("element name runs past its document", off, path)
        if nul - off > self.limits.max_name_bytes:
            raise LimitError(
                f"BSON element name longer than max_name_bytes={self.limits.max_name_bytes}",
                offset=off,
                path=path,
            )
        return self.buf[off:nul].decode("utf-8", "surrogateescape"), nul + 1

    def scalar(self, etype: int, off: int, stop: int, path: TreePath) -> tuple[Any, int]:
        """A non-container element's value at ``off`` (ending by ``stop``) and the offset after it."""
        buf = self.buf
        fixed = _FIXED.get(etype)
        if fixed is not None:
            if off + fixed > stop:
                raise self._error("element truncated", off, path)
            if etype == DOUBLE:
                return np.float64(_F64.unpack_from(buf, off)[0]), off + 8
            if etype == INT64:
                return np.int64(_I64.unpack_from(buf, off)[0]), off + 8
            if etype == INT32:
                return np.int32(_I32.unpack_from(buf, off)[0]), off + 4
            if etype == BOOLEAN:
                b = buf[off]
                if b > 1:
                    raise self._error(f"boolean byte {b} is neither 0 nor 1", off, path)
                return b == 1, off + 1
            return None, off  # NULL
        if etype in (STRING, BINARY):
            if off + 4 > stop:
                raise self._error("length truncated", off, path)
            n = _I32.unpack_from(buf, off)[0]
            if etype == STRING:
                if n < 1 or n > stop - off - 4:
                    raise self._error(f"string length {n} out of range (at most {stop - off - 4})", off, path)
                if n - 1 > self.limits.max_string_bytes:
                    raise LimitError("BSON string longer than max_string_bytes", offset=off, path=path)
                end = off + 4 + n
                if buf[end - 1] != 0:
                    raise self._error("string does not end with a 0 byte", end - 1, path)
                return bytes(buf[off + 4 : end - 1]).decode("utf-8", "surrogateescape"), end
            if n < 0 or n > stop - off - 5:
                raise self._error(
                    f"binary length {n} out of range (at most {max(stop - off - 5, 0)})", off, path
                )
            return Blob(off + 5, n), off + 5 + n
        name = _NAMES.get(etype)
        if name is None:
            raise self._error(f"unknown element type 0x{etype:02x}", off - 1, path)
        raise UnsupportedError(
            f"BSON {name} element (0x{etype:02x}): BSON.jl never writes one", offset=off, path=path
        )

    # --- documents -------------------------------------------------------------------------
    def scan(self, off: int, end: int, path: TreePath) -> list[tuple[str, int, int, int]]:
        """The direct elements of the document at ``off``: ``(key, type, value offset, value
        end)`` each, without parsing inside nested documents (only their lengths are checked)."""
        stop = self.doc_bounds(off, end, path) - 1
        out = []
        pos = off + 4
        buf = self.buf
        while pos < stop:
            etype = buf[pos]
            key, vpos = self._key(pos + 1, stop, path)
            if etype in (DOCUMENT, ARRAY):
                vend = self.doc_bounds(vpos, stop, (*path, key))
            else:
                _, vend = self.scalar(etype, vpos, stop, (*path, key))
            out.append((key, etype, vpos, vend))
            pos = vend
        if pos != stop or buf[stop] != 0:
            raise self._error("elements do not end where their document ends", pos, path)
        return out

    def value(self, etype: int, off: int, end: int, path: TreePath) -> Any:
        """The raw tree of one element's value (type ``etype``, at ``off``, ending by ``end``).

        Iterative: one frame of an explicit stack per open document, at most
        :func:`bson_depth` of them. Two memos make a model's repeated structure cost one parse:

        * types (documents under a ``type`` key or in a ``params`` array, at most
          :data:`LAZY_MAX_BYTES`) are left :class:`Lazy`, one object per distinct content (a
          layer's type repeats at every layer);
        * a document with binaries (an ``array``, a layer) is compared outside their payloads
          with the last one parsed of its length (:class:`_Template`); if they agree, its tree is
          that one's, the documents leading to a binary copied (with their own offsets), each
          binary its own :class:`Blob`, the rest shared. Not used where it would pass the depth
          bound.

        The bytes hashed or kept for these are bounded by the file's size."""
        if etype not in (DOCUMENT, ARRAY):
            return self.scalar(etype, off, end, path)[0]
        buf = self.buf
        find = self._find
        unpack_i32, unpack_i64, unpack_f64 = _I32.unpack_from, _I64.unpack_from, _F64.unpack_from
        max_name = self.limits.max_name_bytes
        max_string = self.limits.max_string_bytes
        max_depth = self.max_depth
        memo = self._memo
        templates = self._templates
        root = self._open(etype, off)
        # Frames: [container, position of the next element, stop (offset of its final 0), path,
        # binaries in it, its offset, whether it is a "params" array (its types are left Lazy)].
        # The common cases are inlined (a model has thousands of elements); anything unusual goes
        # through doc_bounds / scalar, which check.
        stack: list[list[Any]] = [[root, off + 4, self.doc_bounds(off, end, path) - 1, path, 0, off, False]]
        while stack:
            frame = stack[-1]
            container, pos, stop, fpath = frame[0], frame[1], frame[2], frame[3]
            is_seq = type(container) is Seq
            while pos < stop:
                etype = buf[pos]
                nul = find(b"\x00", pos + 1, stop)
                if etype == 0 or nul < 0 or nul - pos - 1 > max_name:
                    self._key(pos + 1, stop, fpath)  # raises the precise error
                    raise self._error("document ends before its length says", pos, fpath)
                key = "" if is_seq else buf[pos + 1 : nul].decode("utf-8", "surrogateescape")
                vpos = nul + 1
                child: Any
                if etype == DOCUMENT or etype == ARRAY:
                    kstart = pos + 1  # (the path is made only when needed)
                    if (
                        vpos + 5 <= stop
                        and 5 <= (n := unpack_i32(buf, vpos)[0]) <= stop - vpos
                        and buf[vpos + n - 1] == 0
                    ):
                        vend = vpos + n  # (doc_bounds, inlined)
                    else:
                        vend = self.doc_bounds(vpos, stop, self._path(fpath, buf, kstart, nul))  # raises
                        n = vend - vpos
                    pos = vend
                    tpl = templates.get(n if etype == DOCUMENT else -n)
                    if tpl is not None and len(stack) + tpl.height <= max_depth and tpl.matches(buf, vpos):
                        child = tpl.at(vpos)
                        frame[4] += len(tpl.holes)
                    elif (
                        etype == DOCUMENT
                        and n <= LAZY_MAX_BYTES
                        and (frame[6] or key == "type")
                        and self._budget >= n
                    ):
                        # a type: one Lazy per distinct content, parsed when first read
                        self._budget -= n
                        mkey = bytes(buf[vpos:vend])
                        child = memo.get(mkey)
                        if child is None:
                            child = memo[mkey] = Lazy(etype, vpos, vend)
                    else:
                        if is_seq:
                            key = buf[kstart:nul].decode("utf-8", "surrogateescape")
                        kpath = (*fpath, key)
                        if len(stack) >= max_depth:
                            raise LimitError(
                                f"BSON documents nested deeper than {max_depth}", offset=vpos, path=kpath
                            )
                        child = Doc() if etype == DOCUMENT else Seq()
                        child.offset = vpos
                        if is_seq:
                            container.append(child)
                        else:
                            container[key] = child
                        frame[1] = pos
                        params = etype == ARRAY and not is_seq and key == "params"
                        stack.append([child, vpos + 4, vend - 1, kpath, 0, vpos, params])
                        break
                elif (
                    etype == STRING
                    and vpos + 4 <= stop
                    and 1 <= (n := unpack_i32(buf, vpos)[0]) <= stop - vpos - 4
                    and n - 1 <= max_string
                    and buf[vpos + 3 + n] == 0
                ):
                    child, pos = buf[vpos + 4 : vpos + 3 + n].decode("utf-8", "surrogateescape"), vpos + 4 + n
                elif etype == INT64 and vpos + 8 <= stop:
                    child, pos = np.int64(unpack_i64(buf, vpos)[0]), vpos + 8
                elif (
                    etype == BINARY
                    and vpos + 5 <= stop
                    and 0 <= (n := unpack_i32(buf, vpos)[0]) <= stop - vpos - 5
                ):
                    child, pos = Blob(vpos + 5, n), vpos + 5 + n
                    frame[4] += 1
                elif etype == DOUBLE and vpos + 8 <= stop:
                    child, pos = np.float64(unpack_f64(buf, vpos)[0]), vpos + 8
                else:
                    if is_seq:
                        key = buf[pos + 1 : nul].decode("utf-8", "surrogateescape")
                    child, pos = self.scalar(etype, vpos, stop, (*fpath, key))
                    if type(child) is Blob:
                        frame[4] += 1
                if is_seq:
                    container.append(child)
                else:
                    container[key] = child
            else:
                if pos != stop:
                    raise self._error("elements do not end where their document ends", pos, fpath)
                stack.pop()
                if frame[4]:
                    self._remember(frame)
                    if stack:
                        stack[-1][4] += frame[4]
        return root

    def materialize(self, lazy: Lazy, path: TreePath) -> Any:
        """The raw tree of a :class:`Lazy` document (parsed once, on its own stack)."""
        if lazy.tree is None:
            lazy.tree = self.value(lazy.etype, lazy.offset, lazy.end, path)
        return lazy.tree

    @staticmethod
    def _path(path: TreePath, buf: Any, start: int, nul: int) -> TreePath:
        """``path`` and the element name from ``start`` to ``nul``."""
        return (*path, buf[start:nul].decode("utf-8", "surrogateescape"))

    def _remember(self, frame: list[Any]) -> None:
        """After parsing a document with binaries: make it the :class:`_Template` of its length
        if it is the second of that length (most lengths occur once), unless documents of that
        length have stopped matching the templates made (they differ more than by binaries)."""
        container, stop, start = frame[0], frame[2], frame[5]
        n = stop + 1 - start
        length_key = n if type(container) is Doc else -n
        made = self._lengths.get(length_key)
        if made is None:  # the first of its length
            self._lengths[length_key] = 0
            return
        if made >= MAX_TEMPLATES_PER_LENGTH:
            return
        self._lengths[length_key] = made + 1
        found = _holes(container)
        if found is None or len(found[0]) != frame[4]:  # (a binary replaced by a later same name)
            return
        holes, height = found
        holes.sort(key=lambda h: h[1])
        kept = n - sum(length for _, _, length in holes)
        if self._budget < kept:
            return
        self._budget -= kept
        segments = []
        prev = start
        for _, offset, length in holes:
            segments.append((prev - start, bytes(self.buf[prev:offset])))
            prev = offset + length
        segments.append((prev - start, bytes(self.buf[prev : stop + 1])))
        self._templates[length_key] = _Template(
            container, start, segments, [(k, o - start, m) for k, o, m in holes], height
        )

    @staticmethod
    def _open(etype: int, off: int) -> Doc | Seq:
        made = Doc() if etype == DOCUMENT else Seq()
        made.offset = off
        return made
