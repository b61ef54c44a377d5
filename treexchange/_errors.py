"""One exception hierarchy for every layer of treexchange.

Every error carries, when known, the *file offset* (absolute byte position in the file) where the
problem was found and the *tree path* (segments in the ``inspect --json`` convention: ``str`` for
names and fields, 1-based ``int`` for tuple/vector positions) of the value being read or written.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

PathSegment = str | int
TreePath = tuple[PathSegment, ...]


def format_path(path: Sequence[PathSegment]) -> str:
    """Render a tree path the way users read it: ``model_state.layers[2].weight``.

    Example:
        >>> format_path(("model_state", "layers", 2, "weight"))
        'model_state.layers[2].weight'
        >>> format_path(())
        '<root>'
    """
    if not path:
        return "<root>"
    out: list[str] = []
    for i, seg in enumerate(path):
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif seg.isidentifier():
            out.append(seg if i == 0 else f".{seg}")
        else:
            out.append(f"[{seg!r}]")
    return "".join(out)


TYPE_WIDTH = 100
"""Julia types longer than this are shortened (with "…") in what ``inspect``, ``diff`` and
``validate`` print for humans; ``--full-types`` prints them whole, ``--json`` always does."""


def clip_type(text: str, width: int | None = TYPE_WIDTH) -> str:
    """``text`` cut to ``width`` characters with a final "…" (whole when ``width`` is None).

    Example:
        >>> clip_type("ComponentArrays.ComponentVector{Float32, Vector{Float32}}", 24)
        'ComponentArrays.Compone…'
    """
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


class TreexchangeError(Exception):
    """Base class of every error treexchange raises on purpose.

    Attributes:
        message: what went wrong, without location.
        offset: absolute file offset of the offending bytes, or ``None``.
        path: tree path of the value concerned (``()`` when not inside a value).
        file: the file being read or written, or ``None`` (filled in by the entry points that
            open a file: ``open``, ``load``, ``infer_schema``/``validate``/``diff`` of a path, the
            commands), so that an error of ``diff a b`` says which file it is about.

    Example:
        >>> from treexchange import TreexchangeError
        >>> err = TreexchangeError("bad thing", offset=560, path=("model_state", "layers", 1))
        >>> str(err)
        'bad thing (at model_state.layers[1], file offset 560)'
        >>> str(err.with_context(file="m.jld2"))
        'm.jld2: bad thing (at model_state.layers[1], file offset 560)'
    """

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        path: Sequence[PathSegment] = (),
    ) -> None:
        self.message = message
        self.offset = offset
        self.path: TreePath = tuple(path)
        self.file: str | None = None
        super().__init__(message)

    def __str__(self) -> str:
        where: list[str] = []
        if self.path:
            where.append(f"at {format_path(self.path)}")
        if self.offset is not None:
            where.append(f"file offset {self.offset}")
        text = f"{self.message} ({', '.join(where)})" if where else self.message
        # a message that starts with the file's name (quoted or not) already says which file
        named = self.file is not None and self.message.startswith((self.file, repr(self.file)))
        return f"{self.file}: {text}" if self.file and not named else text

    def with_context(
        self,
        *,
        offset: int | None = None,
        path: Sequence[PathSegment] | None = None,
        file: str | os.PathLike[str] | None = None,
    ) -> TreexchangeError:
        """Fill in location details that were unknown where the error was raised."""
        if self.offset is None and offset is not None:
            self.offset = offset
        if not self.path and path:
            self.path = tuple(path)
        if self.file is None and file is not None:
            self.file = os.fspath(file)
        return self


@contextmanager
def in_file(source: Any) -> Iterator[None]:
    """Name ``source`` (when it is a path) in every :class:`TreexchangeError` raised inside.

    Example:
        >>> try:
        ...     with in_file("a.jld2"):
        ...         raise FormatError("bad bytes", offset=8)
        ... except FormatError as err:
        ...     print(err)
        a.jld2: bad bytes (file offset 8)
    """
    try:
        yield
    except TreexchangeError as err:
        if isinstance(source, (str, os.PathLike)):
            err.with_context(file=source)
        raise


class FormatError(TreexchangeError, ValueError):
    """The bytes are not a valid file of the expected format (corrupt, truncated, hostile)."""


class WrongFormatError(FormatError):
    """A readable file of another format: JLD v1, plain HDF5 where JLD2 was required, not HDF5."""


class PlainHDF5Error(WrongFormatError):
    """A valid HDF5 file without a JLD2 header: ``open(..., allow_hdf5=True)`` reads it (via h5py)."""


class UnsupportedError(TreexchangeError, NotImplementedError):
    """A valid file or value that uses a feature treexchange does not handle (named in the message)."""


class LimitError(TreexchangeError):
    """A safety limit (see :class:`treexchange.Limits`) would be exceeded."""


class ConversionError(TreexchangeError, TypeError):
    """A value has no counterpart on the other side (e.g. a Python object with no Julia type)."""


class WriteError(TreexchangeError, OSError):
    """Writing the output file failed; the target path was left untouched."""


class MismatchError(TreexchangeError):
    """A tree does not match its template or schema. ``mismatches`` lists every problem.

    Each entry of ``mismatches`` is a :class:`Mismatch`; ``str(err)`` lists them all, one per line.
    """

    def __init__(self, mismatches: Sequence[Mismatch], *, header: str | None = None) -> None:
        self.mismatches: list[Mismatch] = list(mismatches)
        head = header or f"{len(self.mismatches)} mismatch(es)"
        body = "\n".join(f"  {m}" for m in self.mismatches)
        super().__init__(f"{head}:\n{body}" if body else head)

    def __str__(self) -> str:
        return self.message


class Mismatch:
    """One difference between two trees, located by path.

    ``kind`` is one of ``missing``, ``extra``, ``kind``, ``order``, ``dtype``, ``shape``,
    ``checksum``, ``value`` (and ``type`` where a Julia type differs).

    Example:
        >>> from treexchange import Mismatch
        >>> path = ("model_state", "layers", 2, "weight")
        >>> m = Mismatch("shape", path, "(5, 16) in file, (5, 32) in template")
        >>> str(m)
        'model_state.layers[2].weight: shape (5, 16) in file, (5, 32) in template'
    """

    __slots__ = ("detail", "kind", "path", "short")

    def __init__(
        self, kind: str, path: Sequence[PathSegment], detail: str, *, short: str | None = None
    ) -> None:
        self.kind = kind
        self.path: TreePath = tuple(path)
        self.detail = detail
        self.short = short  # the detail with long Julia types shortened, when it names any

    def __str__(self) -> str:
        return self.text()

    def text(self, *, full_types: bool = False) -> str:
        """The one-line report; long Julia types shortened unless ``full_types``."""
        detail = self.detail if full_types or self.short is None else self.short
        return f"{format_path(self.path)}: {self.kind} {detail}"

    def __repr__(self) -> str:
        return f"Mismatch({self.kind!r}, {self.path!r}, {self.detail!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mismatch) and (self.kind, self.path, self.detail) == (
            other.kind,
            other.path,
            other.detail,
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.path, self.detail))

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict: ``{"kind", "path", "message"}``."""
        return {"kind": self.kind, "path": list(self.path), "message": self.detail}
