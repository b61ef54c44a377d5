"""The front door for reading: :func:`load`, the reader facade plus the schema check and the bridge.

:func:`treexchange.open` and :class:`treexchange.File` live in the reader facade
(:mod:`treexchange._reader`, below the schema and the bridge, which read files through it);
``load`` reads through that facade, then checks the value against a schema (the schema layer)
and puts it into a template (the JAX bridge).
"""

from __future__ import annotations

from typing import Any

from ._errors import in_file
from ._limits import DEFAULT_LIMITS, Limits
from ._nodeproto import Order
from ._reader import Source, has_embedded_schema, open, read_entry


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
    with in_file(source), open(source, allow_hdf5=allow_hdf5, limits=limits) as f:
        value = read_entry(f, name, order=order, mmap=mmap)
        if schema is not None or (validate and has_embedded_schema(f)):
            from ._schema import check_loaded  # pydantic is imported only when a schema is in play

            check_loaded(f, value, name=name, validate=validate, schema=schema, order=order)
    if not bridge:
        return value
    # The JAX bridge only when a template or sharding asks for it: plain reading stays free of it.
    from ._bridge import restore

    path = tuple(p for p in name.split("/") if p) if name else ()
    return restore(value, like, sharding=sharding, path=path, **restore_options)
