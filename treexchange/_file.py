"""Public reading API: :func:`open` (lazy :class:`File`) and :func:`load` (eager).

JLD2 files are read by treexchange's own pure-Python codec (numpy + mmap, no h5py). Plain HDF5
files (no JLD2 header) are refused unless the caller passes ``allow_hdf5=True``; they are then
read through h5py into the same value model (see :mod:`treexchange._plainhdf5`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from ._errors import LimitError, PlainHDF5Error, TreexchangeError
from ._jld2._nodes import Group, Node
from ._jld2._reader import Order, Reader
from ._limits import DEFAULT_LIMITS, Limits

Source = str | os.PathLike[str] | bytes


class File(Group):
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
        reader = Reader(source, limits=limits, verify_checksums=verify_checksums)
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
    def reader(self) -> Reader:
        """The low-level reader (internal API)."""
        return self._reader

    def close(self) -> None:
        """Release the file. Arrays already read remain usable."""
        if not self.closed:
            self.closed = True
            self._reader.close()

    def __enter__(self) -> File:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __getitem__(self, key: str) -> Node | Group:
        if self.closed:
            raise ValueError("I/O operation on a closed treexchange.File")
        return super().__getitem__(key)

    def read(self, name: str | None = None, *, order: Order = "julia", mmap: bool = True) -> Any:  # type: ignore[override]
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
) -> File | Mapping[str, Any]:
    """Open a JLD2 file lazily (nothing but the root group is read).

    Args:
        source: a path, or the file's bytes.
        allow_hdf5: also accept plain HDF5 files (no JLD2 header); they are read through h5py
            into the same value model (groups as mappings, datasets as arrays in Julia's
            reversed-dims order). Without it a plain HDF5 file raises WrongFormatError.
        limits: safety limits for untrusted files.
        verify_checksums: also verify HDF5 metadata checksums (JLD2 ignores them).

    Raises:
        WrongFormatError: not JLD2 (JLD v1, plain HDF5 without ``allow_hdf5``, not HDF5).
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
    try:
        return File(source, limits=limits, verify_checksums=verify_checksums)
    except PlainHDF5Error:
        if not allow_hdf5:
            raise
    from ._plainhdf5 import PlainFile

    return PlainFile(source, limits=limits, verify_checksums=verify_checksums)


def load(
    source: Source,
    name: str | None = None,
    *,
    order: Order = "julia",
    allow_hdf5: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    validate: bool = True,
    schema: Any = None,
    like: Any = None,
    sharding: Any = None,
    mmap: bool = True,
    **restore_options: Any,
) -> Any:
    """Read a JLD2 file eagerly: every top-level name as a ``dict``, or the one ``name``.

    Values follow treexchange's value model (NamedTuple, tuple, list, numpy arrays in Julia's
    shape, ...). Uncompressed arrays are zero-copy, writable views of a copy-on-write memory map:
    writing to them never changes the file (``mmap=False`` reads them into arrays of their own
    instead). Arrays shared in Julia come back as one object.

    Args:
        source: a path, or the file's bytes.
        name: one top-level name (``"a/b"`` walks into groups); ``None`` reads everything
            (nested groups as nested dicts).
        order: ``"julia"`` (default): arrays in Julia's shape, F-ordered; ``"storage"``: the
            reversed-dims, C-ordered view of the same bytes (what h5py shows).
        allow_hdf5: accept plain HDF5 files (read through h5py).
        limits: safety limits for untrusted files.
        validate: check the value against the schema embedded in the file (a ``treexchange_schema``
            root attribute, see docs/schema.md) when there is one; ``False`` skips the check.
        schema: check against this schema instead (a :class:`treexchange.Schema`, its JSON text,
            or a path to a JSON file). Either check raises :class:`treexchange.MismatchError`
            listing every violation, before any ``like=`` conversion.
        like: a template PyTree (an Equinox model, dicts, ...): the value is put into its
            structure, each array the kind the template holds there (numpy or jax), checked,
            all mismatches reported together; no value is changed unless asked for (64-bit data
            into jax without x64 is a mismatch). See :func:`treexchange.restore`, which also
            lists the other options: ``strict``, ``allow_missing``, ``allow_extra``, ``cast``,
            ``numpy``, ``layout``, and ``report=True`` (returns ``(tree, RestoreReport)``).
        sharding: a ``jax.sharding.Sharding`` or a PyTree of them; arrays become jax arrays
            placed that way, each device reading only its own slice of the file.
        mmap: ``True`` (default): uncompressed arrays are views of the memory map (nothing is
            read until used; the map lives as long as the arrays). ``False``: every array is
            read into memory of its own with one plain read (``os.preadv``) per array: ordinary
            writable arrays that own their data and hold nothing of the file, which may then
            be deleted or replaced. Faster than touching a map when the file is not in the
            page cache and every byte will be used. Metadata is read through the map either
            way; compressed arrays are always decoded into new arrays.

    Example:
        >>> import os, tempfile, numpy as np, treexchange
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> treexchange.load(path)
        {'a': array([0., 0.])}
        >>> treexchange.load(path, "a").flags.f_contiguous
        True
        >>> treexchange.load(path, "a", mmap=False).flags.owndata
        True
    """
    if order not in ("julia", "storage"):
        raise ValueError(f"order must be 'julia' or 'storage', not {order!r}")
    bridge = like is not None or sharding is not None or bool(restore_options)
    if bridge and order != "julia":
        raise ValueError("like= and sharding= work on arrays in Julia's shape: use order='julia'")
    f: Any = open(source, allow_hdf5=allow_hdf5, limits=limits)
    try:
        if name is not None:
            try:
                f[name]
            except KeyError:
                raise TreexchangeError(f"no entry named {name!r} in the file") from None
        # plain HDF5 arrays come from h5py: private copies already
        value = f.read(name, order=order, mmap=mmap) if isinstance(f, File) else f.read(name, order=order)
        if schema is not None or (validate and _has_embedded_schema(f)):
            from ._schema import check_loaded  # pydantic is imported only when a schema is in play

            check_loaded(f, value, name=name, validate=validate, schema=schema, order=order)
    finally:
        f.close()
    if not bridge:
        return value
    from ._bridge import restore  # imports jax only now

    path = tuple(p for p in name.split("/") if p) if name else ()
    return restore(value, like, sharding=sharding, path=path, **restore_options)


def _has_embedded_schema(f: Any) -> bool:
    attrs = getattr(f, "attrs", None)
    try:
        return attrs is not None and _SCHEMA_ATTRIBUTE in attrs
    except TypeError:
        return False


# Kept in step with treexchange._schema._embedded.SCHEMA_ATTRIBUTE (a test checks it) so that
# deciding whether to validate does not import the schema layer.
_SCHEMA_ATTRIBUTE = "treexchange_schema"
