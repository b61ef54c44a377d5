"""The reader facade: :func:`open` (lazy :class:`File`), reading one entry, a file's objects.

Layer 2 (docs/design.md, "Layers"): it sits on the codec and on :mod:`treexchange._plainhdf5`,
and the domain layers (the schema's file sources and embedded schemas, ``from_flux``, the
conversion sources) read files through it. The front door (:mod:`treexchange._file`) builds
``treexchange.load`` on it, adding the schema check and the JAX bridge.

JLD2 files are read by treexchange's own pure-Python codec (numpy + mmap, no h5py). Plain HDF5
files (no JLD2 header) are refused unless the caller passes ``allow_hdf5=True``; they are then
read through h5py into the same value model (see :mod:`treexchange._plainhdf5`). Either way the
nodes handed out follow one protocol (:mod:`treexchange._nodeproto`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ._bson import sniff as sniff_bson
from ._bsonfile import BsonFile
from ._errors import LimitError, PlainHDF5Error, TreexchangeError, UnsupportedError
from ._hdf5._file import Refused
from ._hdf5._model import H5Class
from ._jld2._nodes import Group, Node, group_links
from ._jld2._reader import Reader, Session
from ._jld2._sessions import grown_groups, session_marks, session_starts
from ._limits import DEFAULT_LIMITS, Limits
from ._nodeproto import ClosingFile, LazyFile, Order
from ._plainhdf5 import PlainFile

Source = str | os.PathLike[str] | bytes

SCHEMA_ATTRIBUTE = "treexchange_schema"
"""Name of the root-group attribute that holds a file's schema (JSON text; docs/schema.md).

Defined here, below the schema layer, so that ``load`` can tell whether a file embeds a schema
without importing the schema layer (pydantic)."""


class File(Group, ClosingFile):
    """An open JLD2 file: a read-only mapping of its top-level names to lazy nodes.

    Opening parses the superblock and the root group only. ``file["model_state"]`` parses that
    dataset's header; its children, types and arrays are read when they are looked at (see
    :class:`treexchange.Node`). ``/_types`` (JLD2's committed types) is hidden. HDF5 groups
    (``"a/b"`` names written by Julia) are :class:`treexchange.Group` mappings, and
    ``file["a/b"]`` walks into them.

    Arrays handed out stay valid after :meth:`close` (they keep the copy-on-write map alive).
    All reads from one open File view that one map: writing into an array you got never reaches
    the disk, but later reads of the same open File see the change (``np.array(node)`` or
    ``arr.copy()`` gives an array of your own).

    Attributes:
        filename: the file name (``"<bytes>"`` when opened from bytes).
        path: ``()``, the tree path of the root group (as for every :class:`treexchange.Group`).
        format_version: the JLD2 format version from the header (``"0.2.0"``, ``"0.1.1"``...).
        producer: the producer note after the header, e.g. ``" (Julia 1.11.1 64-bit LE)"``.
        header: the full header text; ``legacy_header`` tells the pre-2020 spelling
            (``Julia data file (HDF5), version 0.2.0``) apart.

    Example:
        >>> import treexchange, tempfile, pathlib, numpy as np
        >>> path = pathlib.Path(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     list(f), f["a"].kind, f["a"].shape, f.format_version, f.filename == str(path)
        (['a'], 'array', (2,), '0.2.0', True)
    """

    def __init__(
        self,
        source: Source,
        *,
        limits: Limits = DEFAULT_LIMITS,
        verify_checksums: bool = False,
    ) -> None:
        self._take(Reader(source, limits=limits, verify_checksums=verify_checksums))

    @classmethod
    def _of(cls, reader: Reader) -> File:
        """The file of a :class:`Reader` opened already (see :func:`open`)."""
        file = cls.__new__(cls)
        file._take(reader)
        return file

    def _take(self, reader: Reader) -> None:
        super().__init__(reader, (), reader.root_address)
        self.filename = reader.name
        header = reader.header
        assert header is not None
        self.format_version = header.format_version
        self.producer = header.producer
        self.header = header.text
        self.legacy_header = header.legacy
        self.closed = False

    @property
    def attrs(self) -> dict[str, Any]:
        """The root group's HDF5 attributes, decoded (``{}`` for files JLD2 wrote).

        treexchange's writer can store text here (e.g. an embedded schema); JLD2 ignores it.
        """
        if self.closed:
            raise ValueError("I/O operation on a closed treexchange.File")
        return _guard(lambda: self._reader.attributes(self._address))

    @property
    def limits(self) -> Limits:
        """The safety limits the file is read with (``open``'s ``limits``)."""
        return self._reader.limits

    @property
    def file_size(self) -> int:
        """The file's size in bytes (what the bounds that scale with the file derive from)."""
        return self._reader.h5.size

    @property
    def reader(self) -> Reader:
        """The low-level reader (internal API)."""
        return self._reader

    def close(self) -> None:
        """Release the file. Arrays already read remain usable."""
        if not self.closed:
            self.closed = True
            self._reader.close()

    def __getitem__(self, key: str) -> Node | Group:
        if self.closed:
            raise ValueError("I/O operation on a closed treexchange.File")
        return super().__getitem__(key)

    def read(self, name: str | None = None, *, order: Order = "julia", mmap: bool = True) -> Any:
        """Read everything (``dict`` of top-level names) or one name (``"a/b"`` allowed).

        ``mmap=False`` reads every numeric array into memory of its own (see :func:`load`).

        Example:
            >>> import os, tempfile, numpy as np, treexchange
            >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
            >>> treexchange.save(path, a=np.zeros(2))
            >>> with treexchange.open(path) as f:
            ...     a = f.read("a", mmap=False)
            >>> a, a.flags.owndata
            (array([0., 0.]), True)
        """
        if name is None:
            return _guard(lambda: super(File, self).read(order=order, mmap=mmap))
        node = self[name]
        return _guard(lambda: node.read(order=order, mmap=mmap))

    def __repr__(self) -> str:
        return f"<treexchange.File {self.filename!r} (JLD2 {self.format_version}, {len(self)} names)>"


def _guard(f: Any) -> Any:
    try:
        return f()
    except RecursionError as err:
        raise LimitError("structure nested too deeply for Python's stack") from err


def open(
    source: Source,
    *,
    allow_hdf5: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    verify_checksums: bool = False,
) -> LazyFile:
    """Open a JLD2 or BSON.jl file lazily (nothing but the root group is read).

    A BSON.jl file (``BSON.@save``; told by its content: a BSON document starts with its own
    length) opens as a :class:`treexchange._bsonfile.BsonFile`, the same reading interface:
    each top-level name is read when first asked for (docs/bson.md).

    Args:
        source: a path, or the file's bytes.
        allow_hdf5: also accept plain HDF5 files (no JLD2 header); they are read through h5py
            into the same value model (groups as mappings, datasets as arrays in Julia's
            reversed-dims order). Without it a plain HDF5 file raises WrongFormatError.
        limits: safety limits for untrusted files.
        verify_checksums: also verify HDF5 metadata checksums (JLD2 ignores them).

    Returns:
        A :class:`treexchange.File` for a JLD2 file; for a BSON.jl file or a plain HDF5 file an
        object with the same reading interface (a mapping of names to nodes, ``read``, ``attrs``, ``close``).

    Raises:
        WrongFormatError: neither JLD2 nor BSON (JLD v1, plain HDF5 without ``allow_hdf5``,
            neither HDF5 nor BSON).
        FormatError: the file is damaged.

    Example:
        >>> import os, tempfile, numpy as np, treexchange
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     node = f["a"]
        ...     node.kind, str(node.julia_type), node[1]
        ('array', 'Array{Float64, 1}', np.float64(0.0))
    """
    # The JLD2 reader maps the file; the BSON rule is asked of the bytes it mapped, before
    # anything is parsed (a BSON document starts with its length, a 0 last). A path is opened
    # once: sniffing it first took five system calls of its own (6 us, 25 us right after a
    # gc.collect(), of an open of 55 / 110-150 us); a BSON file pays the map it is refused from
    # (open + close of a 16 kB one: 40 -> 52 us).
    # (BsonFile and PlainFile are made outside the except clauses: their own errors carry no
    # refusal as their context.)
    bson = plain = False
    try:
        reader = Reader(source, limits=limits, verify_checksums=verify_checksums, refuse=sniff_bson)
    except Refused:
        bson = True
    except PlainHDF5Error:
        if not allow_hdf5:
            raise
        plain = True
    if bson:
        return BsonFile(source, limits=limits)
    if plain:
        return PlainFile(source, limits=limits, verify_checksums=verify_checksums)
    return File._of(reader)


def read_entry(file: LazyFile, name: str | None = None, *, order: Order = "julia", mmap: bool = True) -> Any:
    """What ``load`` reads from an opened file: every top-level name as a ``dict`` (nested groups
    as nested dicts), or the value of ``name`` (``"a/b"`` walks into groups).

    Raises:
        TreexchangeError: no entry ``name`` in the file.

    Example:
        >>> import os, tempfile, numpy as np, treexchange
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with open(path) as f:
        ...     read_entry(f), read_entry(f, "a", mmap=False).flags.owndata
        ({'a': array([0., 0.])}, True)
        >>> with open(path) as f:
        ...     read_entry(f, "b")
        Traceback (most recent call last):
        ...
        treexchange._errors.TreexchangeError: no entry named 'b' in the file
    """
    if name is not None:
        try:
            file[name]
        except KeyError:
            raise TreexchangeError(f"no entry named {name!r} in the file") from None
    return file.read(name, order=order, mmap=mmap)


def has_embedded_schema(file: LazyFile) -> bool:
    """Whether the file's root group holds a schema (the :data:`SCHEMA_ATTRIBUTE` attribute).

    Example:
        >>> import os, tempfile, treexchange
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=1)
        >>> with open(path) as f:
        ...     has_embedded_schema(f)
        False
    """
    return SCHEMA_ATTRIBUTE in file.attrs


@dataclass(frozen=True)
class Objects:
    """A JLD2 file's values, as ``convert`` re-encodes them (see :func:`read_objects`)."""

    values: list[tuple[str, Any]]
    """Every dataset under its ``"a/b"`` name, in the order of their object-header addresses
    (the order Julia wrote them in), read in one session (shared objects stay one object)."""
    empty_groups: list[str]
    """Groups with no entries, by ``"a/b"`` name."""
    string_attributes: dict[str, str]
    """The root group's attributes (all of them strings, e.g. an embedded schema)."""
    sessions: list[int] = field(default_factory=list)
    """The indexes into :attr:`values` at which a later JLD2 write session starts: the file was
    opened again and written to (``jldopen(path, "a+")``), which :mod:`treexchange._jld2._sessions`
    tells from the group header chunks each session's close left between the datasets."""
    grown_groups: list[list[str]] = field(default_factory=list)
    """Per session, the groups (``"a/b"``; ``""`` the root) that got a continuation chunk when it
    closed, in the order JLD2 saved them (:func:`treexchange._jld2._sessions.grown_groups`)."""
    reached: frozenset[int] = frozenset()
    """The relative addresses of every dataset reading reached, by name or by reference (a
    header the file holds outside these, its groups and its types is linked from nowhere:
    :func:`treexchange._jld2._unlinked.unlinked_headers`)."""
    mutable_ghosts: frozenset[str] = frozenset()
    """Zero-size struct types the file shows are mutable, by qualified name (PyCall's
    ``PyObject``): JLD2 stores them by reference in arrays and fields, one dataset per object."""


def read_objects(file: File) -> Objects:
    """Every value of a JLD2 file with what re-encoding it needs (see :class:`Objects`).

    Raises:
        UnsupportedError: a root attribute that is not a string, or a group reached twice (a
            hard link cycle or a shared group): neither can be written by treexchange's writer.

    Example:
        >>> import os, tempfile, treexchange
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, {"g/b": "x", "a": "y"}, root_attributes={"note": "hi"})
        >>> with File(path) as f:
        ...     objects = read_objects(f)
        >>> objects.values, objects.empty_groups, objects.string_attributes
        ([('g/b', 'x'), ('a', 'y')], [], {'note': 'hi'})
    """
    reader = file.reader
    attributes = _root_string_attributes(reader)
    leaves: list[tuple[int, str, tuple[str, ...]]] = []
    empty_groups: list[str] = []

    # Iterative, each group once: a hard link to an ancestor (legal HDF5, a cycle) or a group
    # linked from two places cannot be written as JLD2 by treexchange's writer.
    groups_seen: dict[int, str] = {}
    pending: list[tuple[Group, str, tuple[str, ...]]] = [(file, "", ())]
    while pending:
        group, prefix, path = pending.pop()
        where = groups_seen.get(group.object_address)
        if where is not None:
            raise UnsupportedError(
                f"group {prefix.rstrip('/') or '/'} is the same HDF5 group as {where or '/'} "
                "(a hard link cycle or a shared group); convert cannot write it",
                path=path,
                offset=reader.h5.absolute(group.object_address),
            )
        groups_seen[group.object_address] = prefix.rstrip("/")
        links = group_links(group)  # name -> object address, in link order
        if not links and prefix:
            empty_groups.append(prefix.rstrip("/"))
        subgroups = []
        for name, address in links.items():
            node = group[name]
            if isinstance(node, Group):
                subgroups.append((node, f"{prefix}{name}/", (*path, name)))
            else:
                leaves.append((address, prefix + name, (*path, name)))
        pending.extend(reversed(subgroups))

    leaves = _write_order(leaves)
    session = Session(reader, "julia")
    # Every value first (one session: shared objects stay shared), so that the writer knows
    # every struct's layout before it commits the first type.
    values = [(name, session.load_ref(address, path)) for address, name, path in leaves]
    addresses = [reader.h5.absolute(a) for a, _, _ in leaves]
    starts = session_starts(addresses, session_marks(reader, groups_seen))
    grown = grown_groups(reader, groups_seen, addresses, starts)
    return Objects(
        values,
        empty_groups,
        attributes,
        starts,
        grown,
        frozenset(session.memo),
        frozenset(session.mutable_ghosts),
    )


def _write_order(leaves: list[tuple[int, str, tuple[str, ...]]]) -> list[tuple[int, str, tuple[str, ...]]]:
    """The leaves (in link order) in the order Julia wrote them: by object-header address, as
    Julia allocates each object when it writes it (a value's parts before its own header). A
    name whose object was already written allocates nothing and keeps its place in its group's
    link order, after the name before it: JLD2 links a group's names in the order it writes
    them, so an object at an address below one of an earlier name of its group was written
    before, by that earlier name (``f["b"] = f["a"]``: one dataset, two links) or as a part
    of its value (``@save f model peps`` where ``model`` holds the mutable ``peps``).

    Example:
        >>> [n for _, n, _ in _write_order([(5, "a", ("a",)), (7, "b", ("b",)), (5, "c", ("c",))])]
        ['a', 'b', 'c']
        >>> [n for _, n, _ in _write_order([(9, "m", ("m",)), (4, "g/x", ("g", "x")), (7, "p", ("p",))])]
        ['g/x', 'm', 'p']
    """
    keys: list[tuple[int, int]] = []
    last: dict[tuple[str, ...], tuple[int, tuple[int, int]]] = {}  # group -> (highest address, last key)
    for address, _, path in leaves:
        group = path[:-1]
        before = last.get(group)
        if before is not None and address <= before[0]:
            key = (before[1][0], before[1][1] + 1)  # right after the name before it
            last[group] = (before[0], key)
        else:
            key = (address, 0)
            last[group] = (address, key)
        keys.append(key)
    order = sorted(range(len(leaves)), key=lambda i: (keys[i], i))
    return [leaves[i] for i in order]


def _root_string_attributes(reader: Reader) -> dict[str, str]:
    """String attributes of the root group (fixed or variable length); others cannot be kept."""
    h5 = reader.h5
    try:
        attrs = h5.object(h5.root_address).attributes
    except TreexchangeError:
        return {}
    out: dict[str, str] = {}
    for name, attr in attrs.items():
        t = attr.type
        if t.cls == H5Class.STRING:
            raw = (
                bytes(attr.data).split(b"\x00", 1)[0] if t.string_padding != 2 else bytes(attr.data).rstrip()
            )
        elif t.cls == H5Class.VLEN and t.is_vlen_string:
            raw = bytes(h5.read_vlen(attr.data))
        else:
            raise UnsupportedError(
                f"root attribute {name!r} is not a string; convert cannot keep it", offset=attr.data_offset
            )
        out[name] = raw.decode("utf-8", errors="replace")
    return out
