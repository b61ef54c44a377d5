"""Which write sessions made a JLD2 file: a file JLD2.jl opened again (``jldopen(path, "a+")`` or
``"r+"``) and wrote to after a first save holds several, and re-encoding it byte for byte means
writing it in the same sessions (``convert``: ``Objects.sessions``, ``write_jld2(sessions=...)``).

What JLD2.jl does (``src/JLD2.jl`` ``jldopen``/``load_file_metadata!``/``close`` and
``src/groups.jl`` ``load_group``/``save_group``, read at v0.4.46, v0.4.55 and v0.6.5):

- Opening an existing file reads the superblock: new objects are allocated from its end-of-file
  address (the end of the previous session's data; nothing is ever written into free space
  inside the file, nothing earlier moves). The root group and ``/_types`` are loaded with their
  links; every committed type is read back and reused (``load_datatypes``), new ones are numbered
  after them. The global heap, the write session and the datatype session start afresh.
- Closing writes, for each group that gained links (``/_types`` first, then the root group), the
  new link messages into the free space its last header chunk reserved (a NIL message before the
  16-byte continuation placeholder) as long as they fit, and the rest into a new continuation
  chunk at the end of the file, pointed at by a continuation message written over the
  placeholder; both chunks' checksums are recomputed. Before v0.4.51 a continuation chunk
  reserves room for 4 more links (``group_extra_space``), later releases none. New groups get new
  headers (before their parent is saved); the superblock gets the new end-of-file address.
- ``delete!`` removes a link message (rewritten as a NIL message), leaving the object's bytes in
  place: such a file holds objects nothing links, which a re-encoding cannot reproduce.

So every session but the last ends with chunks of group headers (new groups', and those of the
groups that gained links: ``/_types``, the root group, a group under it), written after its
datasets and before the next session's, while within one session JLD2 writes group headers only
when it closes: a session boundary lies wherever a chunk of a group header lies between two
datasets (in the order of their addresses). Two sessions
whose links all fit into free space leave no chunk between them and are taken for one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from .._hdf5 import _messages as m

if TYPE_CHECKING:  # (annotations only)
    from ._reader import Reader


def group_chunks(reader: Reader, address: int) -> list[int]:
    """The absolute offsets of the header chunks of the group at ``address``: its first chunk,
    then each continuation chunk in the order they are chained."""
    h5 = reader.h5
    obj = h5.object(address)
    chunks = [h5.absolute(address)]
    for msg in obj.messages:
        if msg[0] == m.CONTINUATION:
            at, _ = m.parse_continuation(obj.cursor(msg), h5.base)
            chunks.append(at)
    return chunks


def session_marks(reader: Reader, groups: Iterable[int]) -> list[int]:
    """Where sessions closed: the header chunks of ``groups`` (addresses: the root group and
    every group under it) and of ``/_types`` (absolute offsets, sorted)."""
    addresses = set(groups)
    types = reader.links(reader.root_address).get("_types")
    if types is not None:
        addresses.add(types)
    return sorted(chunk for address in addresses for chunk in group_chunks(reader, address))


def session_starts(addresses: Sequence[int], marks: Sequence[int]) -> list[int]:
    """The indexes into ``addresses`` (absolute, ascending: the datasets in the order written) at
    which a later session starts: a mark lies between the dataset before and this one.

    Example:
        >>> session_starts([100, 200, 300, 400], [250, 260, 900])
        [2]
        >>> session_starts([100, 200], [900])
        []
    """
    starts = []
    for i in range(1, len(addresses)):
        before, here = addresses[i - 1], addresses[i]
        if any(before < mark < here for mark in marks):
            starts.append(i)
    return starts


def grown_groups(
    reader: Reader, groups: Mapping[int, str], addresses: Sequence[int], starts: Sequence[int]
) -> list[list[str]]:
    """For each session, the groups (``"a/b"`` paths: ``""`` the root, ``"_types"``) that got a
    continuation chunk when it closed, in the order those chunks lie in the file: the order JLD2
    saved them in (its ``close`` saves the groups it loaded in the order of a ``Dict``, then the
    root group). ``addresses``: the datasets' (absolute, ascending); ``starts``: the indexes at
    which later sessions start (:func:`session_starts`)."""
    paths = dict(groups)
    types = reader.links(reader.root_address).get("_types")
    if types is not None:
        paths[types] = "_types"
    firsts = [addresses[i] for i in starts]  # a session's close lies before the next one's data
    grown: list[list[tuple[int, str]]] = [[] for _ in range(len(starts) + 1)]
    for address, path in paths.items():
        for chunk in group_chunks(reader, address)[1:]:
            grown[sum(1 for first in firsts if first < chunk)].append((chunk, path))
    return [[path for _, path in sorted(chunks)] for chunks in grown]
