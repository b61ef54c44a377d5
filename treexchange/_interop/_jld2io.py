"""Writing converted values back to a JLD2 file (groups become ``"a/b"`` names again)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, BinaryIO

from .._atomic import atomic_write
from .._errors import UnsupportedError
from .._jld2._writefile import write_jld2
from .._version import default_producer
from ._treejson import Group


def flatten_groups(
    roots: Mapping[str, Any], prefix: str = "", seen: dict[int, str] | None = None
) -> Iterator[tuple[str, Any]]:
    """``(name, value)`` pairs for :func:`treexchange.save`: a :class:`Group` ``a`` holding ``b``
    gives the name ``"a/b"``, as JLD2 writes nested groups.

    JLD2 writes a tree of groups: one :class:`Group` at two places (a tree format's ``same``
    node; a group of the source file two links name) or inside itself is an UnsupportedError,
    as ``convert`` from a JLD2 file says of a shared HDF5 group (``seen``: the groups met, by
    identity, with their names; a DAG of groups 40 deep would otherwise be 2**40 names).

    Example:
        >>> list(flatten_groups({"a": Group(b=1), "c": 2}))
        [('a/b', 1), ('c', 2)]
    """
    seen = {} if seen is None else seen
    for name, value in roots.items():
        if isinstance(value, Group):
            where = f"{prefix}{name}"
            first = seen.setdefault(id(value), where)
            if first != where:
                raise UnsupportedError(
                    f"group {where} is the same group as {first} (a shared group or a cycle); "
                    "JLD2 writes a tree of groups, convert cannot write it",
                    path=tuple(where.split("/")),
                )
            yield from flatten_groups(value, f"{where}/", seen)
        else:
            yield f"{prefix}{name}", value


def save_jld2(
    path: str | os.PathLike[str], roots: Mapping[str, Any], *, on_write: Callable[[int], None] | None = None
) -> None:
    """Write converted top-level values to a JLD2 file, atomically, as :func:`treexchange.save`
    does; ``on_write(nbytes)`` is called after every piece written (progress, releasing pages
    of a source that is no longer needed)."""
    items = list(flatten_groups(roots))

    def write(f: BinaryIO) -> None:
        write_jld2(
            f, items, compress=None, producer=default_producer(), root_attributes={}, on_write=on_write
        )

    atomic_write(path, write)
