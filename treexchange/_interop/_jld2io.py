"""Writing converted values back to a JLD2 file (groups become ``"a/b"`` names again)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO

from .._atomic import atomic_write
from .._jld2._writefile import write_jld2
from .._version import default_producer
from ._treejson import Group


def flatten_groups(roots: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(name, value)`` pairs for :func:`treexchange.save`: a :class:`Group` ``a`` holding ``b``
    gives the name ``"a/b"``, as JLD2 writes nested groups.

    Example:
        >>> list(flatten_groups({"a": Group(b=1), "c": 2}))
        [('a/b', 1), ('c', 2)]
    """
    for name, value in roots.items():
        if isinstance(value, Group):
            yield from flatten_groups(value, f"{prefix}{name}/")
        else:
            yield f"{prefix}{name}", value


class _CountingFile:
    """A file object that reports every write (bytes count) to a callback; all else delegates."""

    def __init__(self, file: BinaryIO, on_write: Callable[[int], None]) -> None:
        self._file = file
        self._on_write = on_write

    def write(self, data: Any) -> int:
        n = self._file.write(data)
        self._on_write(len(memoryview(data).cast("B")))
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def save_jld2(
    path: str | os.PathLike[str], roots: Mapping[str, Any], *, on_write: Callable[[int], None] | None = None
) -> None:
    """Write converted top-level values to a JLD2 file, atomically, as :func:`treexchange.save`
    does; ``on_write(nbytes)`` is called after every piece written (progress, releasing pages
    of a source that is no longer needed)."""
    items = list(flatten_groups(roots))

    def write(f: BinaryIO) -> None:
        out: Any = f if on_write is None else _CountingFile(f, on_write)
        write_jld2(out, items, compress=None, producer=default_producer(), root_attributes={})

    atomic_write(path, write)
