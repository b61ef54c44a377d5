"""Writing converted values back to a JLD2 file (groups become ``"a/b"`` names again)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

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


def save_jld2(path: str | os.PathLike[str], roots: Mapping[str, Any]) -> None:
    """Write converted top-level values to a JLD2 file (atomically)."""
    from .._save import save

    save(path, dict(flatten_groups(roots)))
