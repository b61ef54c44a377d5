"""Public writing API: :func:`save`, in the spirit of ``jldsave(path; model_state)``.

Files are written atomically: the bytes go to a temporary file in the target's directory, which
is flushed and fsynced, then renamed over the target (``os.replace``), and the directory is
fsynced. A crash, a kill or an exception at any point leaves either the previous file or the
complete new one at ``path``, never a partial file; on an exception the temporary file is
removed. (After a hard kill the temporary file ``.<name>.<random>.tmp`` may remain beside the
target, readable by its owner only; it is never mistaken for the target.) A symbolic link at the
target is followed: the file it points to is replaced, the link stays.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

from ._errors import ConversionError, TreexchangeError, WriteError
from ._jld2._encode_hdf5 import FILE_HEADER_LENGTH, REQUIRED_FILE_HEADER
from ._jld2._writer import JLD2Writer
from ._jld2._writer_arrays import Compression

if TYPE_CHECKING:
    from ._schema import SchemaLike

PathLike = str | os.PathLike[str]


def default_producer() -> str:
    """The producer note written after JLD2's format string: ``" (treexchange 0.1.0 64-bit LE)"``."""
    from . import __version__

    return f" (treexchange {__version__} 64-bit LE)"


def save(
    path: PathLike,
    mapping: Mapping[str, Any] | None = None,
    /,
    *,
    compress: bool | str = False,
    producer: str | None = None,
    root_attributes: Mapping[str, str] | None = None,
    schema: bool | SchemaLike | None = None,
    fsync: bool = True,
    **named_values: Any,
) -> None:
    """Write values to a JLD2 file that Julia's ``JLD2.load`` reads as real Julia values.

    ``save(path, model_state=state)`` is Julia's ``jldsave(path; model_state)``: each name
    becomes one top-level entry; NamedTuples and tuples come back in Julia as real ``NamedTuple``
    and ``Tuple`` values (what ``Flux.loadmodel!`` needs). Names that are not Python identifiers
    (or clash with the options below) go in ``mapping``: ``save(path, {"model/state": x})``;
    ``"a/b"`` names create nested groups, as in JLD2.

    Values: everything the reader returns (see :mod:`treexchange._values`), plus Python scalars
    (``float`` -> Float64, ``int`` -> Int64, ``bool`` -> Bool, ``str`` -> String), numpy and jax
    arrays in Julia's shape (any memory order; C-ordered input is written column-major block by
    block, never copied whole), ``dict`` -> ``Dict{K,V}`` and ``list`` -> ``Vector{Any}``. An array
    object used in two places is written once and shared, as JLD2 does. Anything else raises
    :class:`treexchange.ConversionError` naming its tree path.

    Args:
        path: the file to write (replaced atomically; a symbolic link is followed and its
            target replaced).
        mapping: name -> value pairs, written before ``named_values``.
        compress: ``False`` (default), ``True``/``"deflate"`` (shuffle + deflate) or ``"zstd"``
            (shuffle + zstd; reading it in Python needs ``zstandard``). Compresses every numeric
            array, nested ones included, in a chunked layout both libhdf5 2.x and JLD2.jl read
            (see docs/writing.md).
        producer: the note stored after the format string in the file header (default
            :func:`default_producer`).
        root_attributes: UTF-8 string attributes to attach to the root group. JLD2.jl ignores
            them when loading.
        schema: embed a schema in the file (the ``treexchange_schema`` root attribute, which
            ``load`` then checks; docs/schema.md). ``True`` infers the schema of exactly what is
            written (:func:`treexchange.infer_schema` on the top-level names). A
            :class:`treexchange.Schema`, its JSON text or a path to a JSON file is first checked
            against the values (every violation is reported; nothing is written), then embedded.
            ``None`` (default) embeds nothing.
        fsync: ``True`` (default): the file and its directory are fsynced before ``save``
            returns, so the new file survives a power cut. ``False`` skips both fsyncs, for
            scratch files: still atomic against crashes of the process (the replace happens
            only after every byte is written), but after a power cut the file may be missing
            or incomplete.

    Raises:
        ConversionError: a value has no Julia counterpart (the message names its path).
        MismatchError: the values do not conform to ``schema`` (nothing was written).
        WriteError: the file could not be written (``path`` is left untouched).

    Example:
        >>> import tempfile, os, numpy as np, treexchange
        >>> from treexchange import NamedTuple
        >>> path = os.path.join(tempfile.mkdtemp(), "model.jld2")
        >>> dense = NamedTuple(weight=np.ones((2, 3), np.float32), bias=np.zeros(2, np.float32), σ=())
        >>> state = NamedTuple(layers=(dense,))
        >>> treexchange.save(path, model_state=state)
        >>> back = treexchange.load(path, "model_state")
        >>> back["layers"][0]["weight"].shape, back["layers"][0]["σ"]
        ((2, 3), ())

        With a schema (``load`` checks the file against it from then on):

        >>> treexchange.save(path, model_state=state, schema=True)
        >>> treexchange.read_embedded_schema(path).roots["model_state"].summary()
        'namedtuple (layers)'
        >>> wide = NamedTuple(weight=np.ones((2, 4), np.float32), bias=np.zeros(2, np.float32), σ=())
        >>> doc = treexchange.read_embedded_schema(path)
        >>> treexchange.save(path, model_state=NamedTuple(layers=(wide,)), schema=doc)
        Traceback (most recent call last):
        ...
        treexchange._errors.MismatchError: 1 schema violation(s):
          model_state.layers[1].weight: shape (2, 4) found, schema expects (2, 3)
    """
    items: list[tuple[str, Any]] = []
    if mapping is not None:
        if not isinstance(mapping, Mapping):
            raise TypeError(f"save(path, mapping): mapping must be a Mapping, not {type(mapping).__name__}")
        items.extend(mapping.items())
    items.extend(named_values.items())
    seen: set[str] = set()
    for name, _ in items:
        if not isinstance(name, str):
            raise TypeError(f"names must be str, not {type(name).__name__}")
        if name in seen:
            raise ValueError(f"name {name!r} given twice")
        seen.add(name)
    options = Compression.from_option(compress)
    note = default_producer() if producer is None else producer
    _check_producer(note)
    attrs = _check_root_attributes(root_attributes)
    if schema is not None and schema is not False:
        # Validation (and inference) happen here, before the temporary file is created.
        attrs.update(_schema_attributes(schema, items, attrs))

    def write(f: BinaryIO) -> None:
        writer = JLD2Writer(f, compress=options, producer=note, root_attributes=attrs)
        for name, value in items:
            writer.write(name, value)
        writer.close()

    atomic_write(path, write, fsync=fsync)


def _check_producer(note: str) -> None:
    if not isinstance(note, str) or "\x00" in note:
        raise ValueError("producer must be a str without NUL characters")
    if len(REQUIRED_FILE_HEADER.encode()) + 7 + len(note.encode("utf-8")) > FILE_HEADER_LENGTH:
        raise ValueError("producer note too long for JLD2's 512-byte header")


def _check_root_attributes(attrs: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in (attrs or {}).items():
        if not isinstance(name, str) or not name or "\x00" in name:
            raise ValueError(f"root attribute names must be non-empty str, not {name!r}")
        if not isinstance(value, str):
            raise TypeError(f"root attribute {name!r} must be a str, not {type(value).__name__}")
        out[name] = value
    return out


def _schema_attributes(
    schema: bool | SchemaLike, items: list[tuple[str, Any]], attrs: Mapping[str, str]
) -> dict[str, str]:
    """The root attribute embedding ``schema`` (``True``: inferred from ``items``), after checking
    that ``items`` conform to it."""
    from ._schema import (  # the schema layer (pydantic) is imported only when a schema is given
        SCHEMA_ATTRIBUTE,
        infer_schema,
        load_schema,
        raise_if_invalid,
        schema_to_attributes,
    )

    if SCHEMA_ATTRIBUTE in attrs:
        raise ValueError(
            f"root attribute {SCHEMA_ATTRIBUTE!r} is given twice: as root_attributes and schema="
        )
    tree, groups = value_tree(items)
    if isinstance(schema, bool):  # True (the caller handles False)
        doc = infer_schema(tree)
        doc = doc.model_copy(update={"roots": _group_nodes(doc.roots, groups)})
    else:
        doc = load_schema(schema)
        raise_if_invalid(tree, doc)
    return schema_to_attributes(doc)


Groups = dict[str, "Groups"]


def value_tree(items: list[tuple[str, Any]]) -> tuple[dict[str, Any], Groups]:
    """What ``load(path)`` will return for ``items`` written by ``save``: ``"a/b"`` names become
    nested dicts (the groups JLD2 creates). Also returns the group names, as nested dicts.

    Example:
        >>> value_tree([("a/b", 1), ("a/c", 2), ("x", 3)])
        ({'a': {'b': 1, 'c': 2}, 'x': 3}, {'a': {}})
    """
    tree: dict[str, Any] = {}
    groups: Groups = {}
    for name, value in items:
        # Empty parts are skipped, as the writer does ("/a//b" is "a/b").
        *parents, leaf = [part for part in name.split("/") if part] or [name]
        node, group = tree, groups
        for depth, part in enumerate(parents):
            if part in node and part not in group:
                raise ConversionError(
                    f"{'/'.join(parents[: depth + 1])!r} is a dataset, not a group", path=(name,)
                )
            node = node.setdefault(part, {})
            group = group.setdefault(part, {})
        if leaf in node:
            raise ConversionError(f"a group or dataset named {leaf!r} is already present", path=(name,))
        node[leaf] = value
    return tree, groups


def _group_nodes(roots: Mapping[str, Any], groups: Groups) -> dict[str, Any]:
    """``roots`` with the schema nodes of groups made group nodes (inferred from plain dicts,
    they are dict nodes)."""
    from ._schema import GroupNode

    out = dict(roots)
    for name, subgroups in groups.items():
        out[name] = GroupNode(entries=_group_nodes(out[name].entries, subgroups))
    return out


def atomic_write(path: PathLike, write: Callable[[BinaryIO], None], *, fsync: bool = True) -> None:
    """Run ``write(f)`` on a temporary file beside ``path``, then atomically replace ``path``.

    Sequence: create ``.<name>.<random>.tmp`` (``<name>`` cut to 200 bytes, so any legal file
    name still leaves room) in the same directory, readable by the owner only; write, flush, set
    the final permission bits, ``fsync`` the file, ``os.replace`` it onto ``path``, ``fsync`` the
    directory (so the rename itself survives a power cut). On any exception, ``KeyboardInterrupt``
    included, the temporary file is closed and deleted and ``path`` is untouched.

    If ``path`` is a symbolic link, the file it points to is replaced and the link is kept (as
    ``open(path, "wb")`` would). An existing file's permission bits (``0o777``; never setuid,
    setgid or sticky) are kept; a new file gets the usual ``0o666 & ~umask``. The temporary file
    is ``0o600`` until just before the rename, so a private checkpoint is never readable by
    others while it is written, nor in a leftover temporary file. ``fsync=False`` skips the
    two ``fsync`` calls (scratch files: atomic, not durable).

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "x.bin")
        >>> atomic_write(p, lambda f: f.write(b"hello"))
        >>> open(p, "rb").read(), sorted(os.listdir(os.path.dirname(p)))
        (b'hello', ['x.bin'])
    """
    # realpath: replacing a symlink's target, not the link (a dangling link names the file to create).
    target = os.path.realpath(os.fspath(path))
    directory = os.path.dirname(target)
    base = os.path.basename(target)
    if not base:
        raise WriteError(f"not a file path: {os.fspath(path)!r}")
    tmp = os.path.join(directory, f".{_shortened(base)}.{secrets.token_hex(6)}.tmp")
    f: BinaryIO | None = None
    created = True  # from here on the file may exist: an interrupt just after the open must clean up
    try:
        try:
            # One call makes the file object: an interrupt cannot leave a bare descriptor behind.
            f = open(tmp, "x+b", opener=_private_opener)  # closed below, on every path
        except OSError as err:
            created = False  # nothing was created (or it is not ours): leave it
            raise WriteError(f"cannot create a temporary file in {directory}: {err.strerror or err}") from err
        write(f)
        f.flush()
        _set_mode(f, tmp, _final_mode(target))
        if fsync:
            os.fsync(f.fileno())
        f.close()
        os.replace(tmp, target)
    except BaseException as err:
        if f is not None:
            try:
                f.close()
            except OSError:
                pass
        if created:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(err, OSError) and not isinstance(err, TreexchangeError):
            raise WriteError(f"writing {target} failed: {err}") from err
        raise
    if fsync:
        _fsync_directory(directory)


_TMP_NAME_BYTES = 200
"""Longest piece of the target's name kept in the temporary file's name: with the dot, the 12
random hex digits and the suffix, the name stays within the usual 255-byte limit."""


def _shortened(base: str) -> str:
    """``base`` cut to :data:`_TMP_NAME_BYTES` bytes of UTF-8 (never inside a character).

    Example:
        >>> len(_shortened("x" * 250)), _shortened("σ" * 150) == "σ" * 100
        (200, True)
    """
    raw = os.fsencode(base)
    if len(raw) <= _TMP_NAME_BYTES:
        return base
    return os.fsdecode(raw[:_TMP_NAME_BYTES].decode("utf-8", errors="ignore").encode("utf-8"))


def _private_opener(path: str, flags: int) -> int:
    return os.open(path, flags, 0o600)


def _final_mode(target: str) -> int:
    """The permission bits the new file gets: the replaced file's, else ``0o666 & ~umask``."""
    try:
        return os.stat(target).st_mode & 0o777
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    # Linux reports the umask without changing it; elsewhere set-and-restore is the only way.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _set_mode(f: BinaryIO, tmp: str, mode: int) -> None:
    if hasattr(os, "fchmod"):
        os.fchmod(f.fileno(), mode)
    else:  # pragma: no cover - Windows before Python 3.13
        os.chmod(tmp, mode)


def _fsync_directory(directory: str) -> None:
    # Makes the rename durable on POSIX; not possible (nor needed) on Windows.
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
