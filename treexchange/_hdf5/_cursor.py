"""A bounds-checked little-endian reader over the file buffer.

Every HDF5 structure is decoded through a :class:`Cursor`, so a truncated or lying file raises
:class:`~treexchange.FormatError` carrying the absolute file offset of the bad read instead of
``IndexError``/``struct.error`` or a silent short read.
"""

from __future__ import annotations

import builtins
import struct
from types import TracebackType

from .._errors import FormatError, LimitError, TreexchangeError

UNDEFINED = None
"""What :meth:`Cursor.address` returns for the undefined address (all bits set)."""

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class Cursor:
    """Reads fixed-width fields from ``buf[pos:end]``; ``pos`` is an absolute file offset.

    ``offset_size``/``length_size`` are the superblock's "size of offsets" and "size of lengths".

    Example:
        >>> c = Cursor(memoryview(b"\\x01\\x02\\x00\\xff"), 0)
        >>> c.u8(), c.u16()
        (1, 2)
        >>> c.u16()
        Traceback (most recent call last):
        ...
        treexchange._errors.FormatError: truncated: need 2 byte(s), 1 left (file offset 3)
    """

    __slots__ = ("buf", "end", "length_size", "offset_size", "pos")

    def __init__(
        self,
        buf: memoryview,
        pos: int,
        end: int | None = None,
        *,
        offset_size: int = 8,
        length_size: int = 8,
    ) -> None:
        n = len(buf)
        # (a conditional instead of min(): cursors are made by the hundred thousand)
        end = n if end is None or end > n else end
        if pos < 0 or pos > end:
            raise FormatError(f"offset {pos} lies outside the file ({n} bytes)", offset=pos)
        self.buf = buf
        self.pos = pos
        self.end = end
        self.offset_size = offset_size
        self.length_size = length_size

    # --- primitive reads ---------------------------------------------------------------------
    def need(self, n: int) -> None:
        """Raise unless ``n`` more bytes can be read."""
        if n < 0 or self.pos + n > self.end:
            raise FormatError(
                f"truncated: need {n} byte(s), {max(self.end - self.pos, 0)} left", offset=self.pos
            )

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    # The fixed-width reads check bounds inline rather than through need(): they are the
    # innermost loop of header parsing, and a method call per field doubled its cost.
    def _short(self, n: int) -> FormatError:
        return FormatError(
            f"truncated: need {n} byte(s), {max(self.end - self.pos, 0)} left", offset=self.pos
        )

    def u8(self) -> int:
        p = self.pos
        if p >= self.end:
            raise self._short(1)
        self.pos = p + 1
        return self.buf[p]

    def u16(self) -> int:
        p = self.pos
        if p + 2 > self.end:
            raise self._short(2)
        self.pos = p + 2
        return _U16.unpack_from(self.buf, p)[0]  # type: ignore[no-any-return]

    def u32(self) -> int:
        p = self.pos
        if p + 4 > self.end:
            raise self._short(4)
        self.pos = p + 4
        return _U32.unpack_from(self.buf, p)[0]  # type: ignore[no-any-return]

    def u64(self) -> int:
        p = self.pos
        if p + 8 > self.end:
            raise self._short(8)
        self.pos = p + 8
        return _U64.unpack_from(self.buf, p)[0]  # type: ignore[no-any-return]

    def uint(self, n: int) -> int:
        """An unsigned little-endian integer of ``n`` bytes (0 <= n <= 8)."""
        if n == 8:
            return self.u64()
        if n == 4:
            return self.u32()
        if n == 2:
            return self.u16()
        if n == 1:
            return self.u8()
        if n > 8 or n < 0:
            raise FormatError(f"integer field of {n} bytes is not 0-8 bytes wide", offset=self.pos)
        self.need(n)
        v = int.from_bytes(bytes(self.buf[self.pos : self.pos + n]), "little")
        self.pos += n
        return v

    def bytes(self, n: int) -> memoryview:
        """A zero-copy view of the next ``n`` bytes."""
        self.need(n)
        v = self.buf[self.pos : self.pos + n]
        self.pos += n
        return v

    def skip(self, n: int) -> None:
        self.need(n)
        self.pos += n

    def align(self, multiple: int, origin: int = 0) -> None:
        """Skip padding so that ``pos - origin`` becomes a multiple of ``multiple``."""
        pad = (-(self.pos - origin)) % multiple
        if pad:
            self.skip(pad)

    # --- HDF5 field kinds --------------------------------------------------------------------
    def address(self) -> int | None:
        """A relative file address of ``offset_size`` bytes; ``None`` when undefined (all ones)."""
        n = self.offset_size
        v = self.uint(n)
        return None if v == (1 << (8 * n)) - 1 else v

    def length(self) -> int:
        """A length field of ``length_size`` bytes."""
        return self.uint(self.length_size)

    def signature(self, sig: builtins.bytes, what: str) -> None:
        """Consume a 4-byte signature such as ``b"OHDR"`` or raise FormatError."""
        at = self.pos
        got = bytes(self.bytes(len(sig)))
        if got != sig:
            raise FormatError(f"bad {what} signature {got!r} (expected {sig!r})", offset=at)

    def cstring(self, limit: int | None = None) -> builtins.bytes:
        """A NUL-terminated byte string (the NUL is consumed, not returned)."""
        stop = self.end if limit is None else min(self.end, self.pos + limit)
        # Names are short: search growing windows instead of copying the rest of the file.
        window = 64
        start = self.pos
        while True:
            hi = min(stop, start + window)
            i = bytes(self.buf[start:hi]).find(b"\x00")
            if i >= 0:
                s = bytes(self.buf[self.pos : start + i])
                self.pos = start + i + 1
                return s
            if hi >= stop:
                raise FormatError("unterminated string", offset=self.pos)
            start = hi
            window *= 4

    def sub(self, n: int) -> Cursor:
        """A cursor over the next ``n`` bytes (this cursor skips past them)."""
        self.need(n)
        c = Cursor(
            self.buf,
            self.pos,
            self.pos + n,
            offset_size=self.offset_size,
            length_size=self.length_size,
        )
        self.pos += n
        return c

    def at(self, pos: int, end: int | None = None) -> Cursor:
        """A new cursor with the same field widths at absolute ``pos`` (bounded by this buffer)."""
        if pos < 0 or pos > len(self.buf):
            raise FormatError(f"offset {pos} lies outside the file ({len(self.buf)} bytes)", offset=pos)
        return Cursor(
            self.buf,
            pos,
            end,
            offset_size=self.offset_size,
            length_size=self.length_size,
        )


def enc_size(value: int) -> int:
    """Bytes HDF5 uses to encode integers up to ``value`` (``H5VM_limit_enc_size``).

    Example:
        >>> enc_size(255), enc_size(256), enc_size(65536)
        (1, 2, 3)
    """
    return (max(value, 1).bit_length() - 1) // 8 + 1


class format_errors:  # used like a function: ``with format_errors(offset):``
    """Turn stray low-level exceptions into FormatError carrying ``offset``.

    Every decoder checks bounds itself; this is the safety net the contract asks for, so that a
    hostile file never surfaces IndexError, struct.error, ValueError or RecursionError.
    Our own errors pass through untouched.

    Example:
        >>> with format_errors(12):  # doctest: +ELLIPSIS
        ...     b""[3]
        Traceback (most recent call last):
        ...
        treexchange._errors.FormatError: malformed HDF5 structure (IndexError: ...) (file offset 12)
    """

    __slots__ = ("offset",)

    def __init__(self, offset: int | None) -> None:
        self.offset = offset

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if ev is None or isinstance(ev, TreexchangeError):
            return
        if isinstance(ev, LOW_LEVEL_ERRORS):
            raise as_treexchange_error(ev, self.offset) from ev


FORMAT_ERRORS = (IndexError, ValueError, OverflowError, struct.error)
"""The low-level exceptions a malformed structure can cause (turned into FormatError)."""

LOW_LEVEL_ERRORS = (RecursionError, *FORMAT_ERRORS)
"""What :class:`format_errors` turns into a TreexchangeError (:func:`as_treexchange_error`);
hot paths catch these in a plain ``try`` instead (no context manager per call)."""


def as_treexchange_error(err: BaseException, offset: int | None) -> TreexchangeError:
    """The error :class:`format_errors` raises for one of :data:`LOW_LEVEL_ERRORS`: depth is a
    limit, never damage (LimitError); anything else is a malformed structure (FormatError)."""
    if isinstance(err, RecursionError):
        return LimitError(
            "structure nested too deeply for Python's stack (see Limits.max_depth)", offset=offset
        )
    return malformed(err, offset)


def malformed(err: BaseException, offset: int | None) -> FormatError:
    """The FormatError that :class:`format_errors` raises for ``err``."""
    return FormatError(f"malformed HDF5 structure ({type(err).__name__}: {err})", offset=offset)
