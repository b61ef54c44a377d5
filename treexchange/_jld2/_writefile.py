"""One JLD2 file from ``(name, value)`` pairs: the write loop that ``save``, ``convert`` and the
other formats' import (``treexchange._interop``) share, so every writer of a file takes the same
steps (types of every value learnt first, then the values, then empty groups)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, BinaryIO

from treexchange._errors import ConversionError

from ._era import Source
from ._writer import JLD2Writer
from ._writer_arrays import Compression


def check_link_name(name: str) -> None:
    """A top-level name (``"a/b"`` for a group's entry) that a link can hold: no NUL, and UTF-8
    (a lone surrogate, which a name read from a damaged BSON or JSON file can hold, has no UTF-8
    form). Checked for every writer of a file before anything is written.

    Example:
        >>> check_link_name("weights/conv1")
        >>> check_link_name("a\\udcff")
        Traceback (most recent call last):
        ...
        treexchange._errors.ConversionError: name 'a\\udcff' holds a lone surrogate, ...
    """
    if "\x00" in name:
        raise ConversionError(f"name {name!r} contains a NUL character", path=(name,))
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ConversionError(
            f"name {name!r} holds a lone surrogate, which has no UTF-8 form", path=(name,)
        ) from None


def write_jld2(
    out: BinaryIO,
    items: list[tuple[str, Any]],
    *,
    compress: Compression | None,
    producer: str,
    root_attributes: Mapping[str, str],
    empty_groups: list[str] | None = None,
    format_version: str = "0.2.0",
    on_write: Callable[[int], None] | None = None,
    source: Source | None = None,
    sessions: Sequence[int] = (),
    grown_groups: Sequence[Sequence[str]] = (),
    last_compress: Compression | None = None,
) -> None:
    """Write ``(name, value)`` pairs (values as ``treexchange._save.prepare_values`` makes them, or
    as the reader returns them) and ``empty_groups`` as a JLD2 file to ``out``; ``on_write(n)``
    is told the size of every write once its bytes are taken from the values' memory;
    ``source``: what re-encoding a file keeps of it (:class:`treexchange._jld2._era.Source`);
    ``sessions``: the indexes into ``items`` at which a new write session starts (the file closed
    and opened again, as JLD2's ``jldopen(path, "a+")``: ``JLD2Writer.close_session``);
    ``grown_groups``: per session, the groups to save first when it closes (``Objects.grown_groups``);
    ``last_compress``: the compression of the last session when there are several (``compress``
    is the earlier ones': ``save(mode="a")`` keeps how a file's values are stored)."""
    for name in [*(n for n, _ in items), *(empty_groups or ())]:
        check_link_name(name)
    writer = JLD2Writer(
        out,
        compress=compress,
        producer=producer,
        root_attributes=dict(root_attributes),
        format_version=format_version,
        on_write=on_write,
        source=source,
    )
    writer.prepare(items)  # every struct's layout known before the first type is committed
    starts = set(sessions)
    closed = 0
    for i, (name, value) in enumerate(items):
        if i in starts:
            writer.close_session(grown_groups[closed] if closed < len(grown_groups) else ())
            closed += 1
            if closed == len(starts):
                writer.set_compression(last_compress)
        writer.write(name, value)
    for name in empty_groups or ():
        writer.create_group(name)
    writer.close(grown_groups[closed] if closed < len(grown_groups) else ())
