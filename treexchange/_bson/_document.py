"""An opened BSON.jl file: the bytes (a copy-on-write memory map), the index of its top-level
entries and of its ``_backrefs``, and reading an entry's value in a :class:`Session`."""

from __future__ import annotations

import mmap
import os
from typing import Any

from .._errors import FormatError, LimitError, TreePath, UnsupportedError, WrongFormatError
from .._gc import gc_paused
from .._limits import DEFAULT_LIMITS, Limits
from .._recursion import stack_for_depth
from ._container import ARRAY, DOCUMENT, STRING, Parser, looks_like_bson
from ._julia import Session

BACKREFS = "_backrefs"
"""The root key under which BSON.jl stores every value referenced from more than one place."""


def sniff(source: str | os.PathLike[str] | bytes | bytearray | memoryview) -> bool:
    """Whether ``source`` (a path or the bytes) looks like a BSON document (see
    :func:`looks_like_bson`): four bytes and the last one read, nothing parsed.

    Example:
        >>> sniff(b"\\x05\\x00\\x00\\x00\\x00"), sniff(b"\\x89HDF\\r\\n\\x1a\\n")
        (True, False)
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source[:4])
        return looks_like_bson(data, len(source), source[-1] if len(source) else 1)
    try:
        # a raw descriptor and two positioned reads: every treexchange.open of a path comes here
        # first, and a buffered file object costs twice the system calls' time
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            size = os.fstat(fd).st_size
            if size < 5:
                return False
            head = _read_at(fd, 4, 0)
            last = _read_at(fd, 1, size - 1)
        finally:
            os.close(fd)
    except OSError:
        return False
    return looks_like_bson(head, size, last[0] if last else 1)


def _read_at(fd: int, n: int, offset: int) -> bytes:
    """``n`` bytes at ``offset`` of the open descriptor ``fd`` (fewer at its end)."""
    if hasattr(os, "pread"):
        return os.pread(fd, n, offset)
    os.lseek(fd, offset, os.SEEK_SET)  # (Windows: no pread)
    return os.read(fd, n)


class BsonDocument:
    """A BSON.jl file opened for reading: ``entries`` (top-level name -> where its value is) and
    the ``_backrefs`` index; values are parsed when :meth:`session` reads them.

    Raises:
        WrongFormatError: the bytes are not a BSON document.
        FormatError: the root document's elements do not fit it.
    """

    def __init__(self, source: str | os.PathLike[str] | bytes, *, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._map: mmap.mmap | None = None
        buf: Any
        if isinstance(source, (bytes, bytearray, memoryview)):
            self.name = "<bytes>"
            buf = bytearray(source)  # arrays handed out are writable views of a copy, as for a map
        else:
            self.name = os.fspath(source)
            with open(self.name, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    raise WrongFormatError(f"{self.name!r} is empty, not a BSON file")
                self._map = buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        self.buf = buf
        self.size = len(buf)
        if not looks_like_bson(bytes(buf[:4]), self.size, buf[-1] if self.size else 1):
            raise WrongFormatError(f"{self.name!r} is not a BSON file (its first 4 bytes are not its length)")
        self.parser = Parser(buf, limits)
        self.entries: dict[str, tuple[int, int, int]] = {}
        backrefs: tuple[int, int, int] | None = None
        for key, etype, off, end in self.parser.scan(0, self.size, ()):
            if key == BACKREFS:
                backrefs = (etype, off, end)
            elif key in self.entries:
                raise FormatError(f"BSON: the name {key!r} appears twice at the top level", offset=off)
            else:
                self.entries[key] = (etype, off, end)
        self.backrefs: list[tuple[int, int, int]] = []
        if backrefs is not None:
            etype, off, end = backrefs
            if etype != ARRAY:
                raise FormatError("BSON.jl _backrefs is not an array", offset=off, path=(BACKREFS,))
            self.backrefs = [(t, o, e) for _, t, o, e in self.parser.scan(off, end, (BACKREFS,))]
        # ``BSON.bson(path, d)`` with ``d`` a Dict other than ``Dict{Symbol}`` (a Dict{String,Any}):
        # BSON.jl lowers ``d`` itself, so the root document is ``d``'s tagged document and
        # ``BSON.load`` returns ``d``. Its keys are then the file's names (read whole, once).
        self.lowered_root = self._is_lowered_root()
        # The session that read a lowered root for its names: the first reader's session (the
        # root's values are in it already; a new one would parse the whole file again).
        self._opening: Session | None = None
        if self.lowered_root:
            self._opening = self.session()
            self.entries = dict.fromkeys(self._root_value(self._opening), self.entries["tag"])

    def _is_lowered_root(self) -> bool:
        tag = self.entries.get("tag")
        if tag is None or tag[0] != STRING or "data" not in self.entries or "type" not in self.entries:
            return False
        return self.parser.value(*tag, ("tag",)) == "struct"

    def _root_value(self, session: Session) -> dict[str, Any]:
        """The lowered root's value in ``session`` (read once per session), by name."""
        cached = getattr(session, "lowered_root", None)
        if cached is not None:
            return cached
        try:  # thousands of raw documents made and dropped, values kept: nothing for the collector
            with stack_for_depth(self.limits.max_depth), gc_paused():
                value = session.value(self.parser.value(DOCUMENT, 0, self.size, ()), ())
        except RecursionError as err:
            raise LimitError("structure nested too deeply for Python's stack", path=()) from err
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):  # str: Symbol too
            raise UnsupportedError(
                f"the file holds one {getattr(value, 'julia_type', type(value).__name__)} (BSON.bson with a "
                "value that is not a Dict of String or Symbol keys), not named entries",
                offset=0,
            )
        named = {str(k): v for k, v in value.items()}
        session.lowered_root = named
        return named

    def session(self, *, order: str = "julia", mmap: bool = True) -> Session:
        """A new reading session (backrefs shared within it); the first one asked for in the
        default order and mode is the one that read a lowered root at opening, if any."""
        opening = self._opening
        if opening is not None and order == "julia" and mmap:
            self._opening = None
            return opening
        return Session(self.parser, self.backrefs, order=order, mmap=mmap)

    def read(self, session: Session, name: str) -> Any:
        """The value of top-level ``name`` (KeyError if there is none)."""
        etype, off, end = self.entries[name]
        if self.lowered_root:
            return self._root_value(session)[name]
        path: TreePath = (name,)
        raw = self.parser.value(etype, off, end, path)
        return session.value(raw, path)

    def close(self) -> None:
        """Drop this object's hold on the map (arrays already read keep it alive)."""
        self._map = None
        self._opening = None
