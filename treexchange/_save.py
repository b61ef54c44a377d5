"""The front door for writing: :func:`save`, in the spirit of ``jldsave(path; model_state)``, and
:func:`convert`, which re-encodes a JLD2 file (``treexchange convert``).

Files are written atomically: the bytes go to a temporary file in the target's directory, which
is flushed and fsynced, then renamed over the target (``os.replace``), and the directory is
fsynced. A crash, a kill or an exception at any point leaves either the previous file or the
complete new one at ``path``, never a partial file; on an exception the temporary file is
removed. On Linux the temporary file has no name until the rename (``O_TMPFILE``): a hard kill
leaves nothing behind. Elsewhere, after a hard kill (SIGKILL, power loss) the temporary file
``.<name>.txtmp<pid>-<random>.tmp`` may remain beside the target, readable by its owner only; the
next save to the same directory removes it (its process is gone). A ``KeyboardInterrupt`` that
arrives once the new file is in place is not reported: the save is complete. A symbolic link at
the target is followed: the file it points to is replaced, the link stays.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, BinaryIO

from ._atomic import atomic_write, remove_stale_temporaries
from ._bridge._to_julia import convert_items
from ._bson import sniff as sniff_bson
from ._bsonfile import BsonFile
from ._errors import ConversionError, TreexchangeError, UnsupportedError, WriteError, in_file
from ._gc import gc_paused
from ._jld2._encode_hdf5 import FILE_HEADER_LENGTH, REQUIRED_FILE_HEADER, filter_pipeline
from ._jld2._era import (
    ANY_FORMAT_RULES,
    Source,
    committed_layouts,
    difference_note,
    era_rules,
    first_difference,
    header_traits,
    recommitted_keys,
    type_keys,
)
from ._jld2._unlinked import unlinked_headers
from ._jld2._writefile import check_link_name, write_jld2
from ._jld2._writer import FORMATS
from ._jld2._writer_arrays import JLD2_DEFLATE_PIPELINE, Compression
from ._reader import SCHEMA_ATTRIBUTE, File, Objects, read_objects
from ._values import values_equal
from ._version import default_producer

if TYPE_CHECKING:
    from ._schema import SchemaLike

PathLike = str | os.PathLike[str]


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
    format: str = "0.2.0",
    mode: str = "w",
    **named_values: Any,
) -> None:
    """Write values to a JLD2 file that Julia's ``JLD2.load`` reads as real Julia values.

    ``save(path, model_state=state)`` is Julia's ``jldsave(path; model_state)``: each name
    becomes one top-level entry; NamedTuples and tuples come back in Julia as real ``NamedTuple``
    and ``Tuple`` values (what ``Flux.loadmodel!`` needs). Names that are not Python identifiers
    (or clash with the options below) go in ``mapping``: ``save(path, {"model/state": x})``;
    ``"a/b"`` names create nested groups, as in JLD2.

    Values: everything the reader returns (see :mod:`treexchange._values`) and everything
    :func:`treexchange.to_julia` accepts (Equinox modules, dataclasses, namedtuples, jax arrays,
    Python scalars), converted as it converts them: numpy and jax arrays in Julia's shape (any
    memory order; C-ordered input is written column-major block by block, never copied whole),
    ``list`` -> ``Vector{Any}``, a plain ``dict`` with ``str`` keys -> ``NamedTuple`` (Lux's
    ``ps``), a :class:`treexchange.JuliaDict` (what ``load`` returns for a Julia ``Dict``) or a
    dict with other keys -> ``Dict{K,V}``. An object used in two places is written once and
    shared, as JLD2 does; a list or mutable ``JuliaStruct`` that contains itself is written as
    the cycle JLD2.jl writes. Other cycles, text with lone surrogates and anything without a Julia
    counterpart raise :class:`treexchange.ConversionError` naming its tree path; trees deeper
    than ``Limits().max_depth`` raise :class:`treexchange.LimitError`.

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
        format: the JLD2 format version written: ``"0.2.0"`` (default; JLD2.jl >= 0.5) or
            ``"0.1.1"`` (JLD2.jl 0.3 - 0.4.55, for a Julia side pinned to an older JLD2; no
            compression: :class:`UnsupportedError`). Format 0.1.1 is byte-identical with what
            JLD2.jl 0.4 writes for the cases in docs/writing.md; see there for the differences
            that remain (the order in which some type datasets are written).
        mode: ``"w"`` (default) writes a new file (replacing ``path``). ``"a"`` adds the names
            to the JLD2 file at ``path`` (created if absent) as one more write session, as
            Julia's ``jldopen(path, "a+")`` then ``f[name] = value`` do: its values stay as they
            are stored (its sessions, types, JLD2's compression; see docs/writing.md), the new
            ones follow, compressed as ``compress`` says. The file is rewritten whole
            (atomically, like any save); its format is kept, and ``format`` must name it.
            A name it already holds raises :class:`treexchange.ConversionError`; ``schema`` and
            ``root_attributes`` are refused, as is a file with an embedded schema.

    Raises:
        ConversionError: a value has no Julia counterpart, holds a cycle or text without a UTF-8
            form (the message names its path).
        LimitError: the tree is nested deeper than ``Limits().max_depth``.
        MismatchError: the values do not conform to ``schema`` (nothing was written).
        WriteError: the file could not be written (``path`` is left untouched); ``producer`` or
            ``root_attributes`` hold a lone surrogate (no UTF-8 form); a Dict has two keys Julia
            holds as one (two NaNs: Julia's ``isequal`` makes every NaN the same key).

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

        For a Julia side pinned to JLD2 0.3 - 0.4 (format 0.1.1):

        >>> treexchange.save(path, model_state=state, format="0.1.1")
        >>> with treexchange.File(path) as f:
        ...     f.format_version
        '0.1.1'

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

        Adding to a file, as ``jldopen(path, "a+")`` does:

        >>> treexchange.save(path, model_state=state)
        >>> treexchange.save(path, mode="a", epoch=3)
        >>> sorted(treexchange.load(path))
        ['epoch', 'model_state']
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
    # The collector paused throughout (converting, laying out, writing): a large tree makes
    # many lasting objects and no garbage cycles, and one pause does not end (and so start a
    # collection over all of them) between the steps, only once they are dropped.
    if mode not in ("w", "a"):
        raise ValueError(f"mode must be 'w' or 'a', not {mode!r}")
    if mode == "a" and (schema is not None or root_attributes is not None):
        raise ValueError("save(mode='a') keeps the file's root attributes: no schema= or root_attributes=")
    with gc_paused():
        if mode == "a" and os.path.exists(path):
            _append_items(path, prepare_values(items), compress, producer, fsync, format)
            return
        _save_items(path, prepare_values(items), compress, producer, root_attributes, schema, fsync, format)


def _save_items(
    path: PathLike,
    items: list[tuple[str, Any]],
    compress: bool | str,
    producer: str | None,
    root_attributes: Mapping[str, str] | None,
    schema: bool | SchemaLike | None,
    fsync: bool,
    format: str,
) -> None:
    """:func:`save` once the values are converted."""
    options = Compression.from_option(compress)
    note = default_producer() if producer is None else producer
    _check_producer(note)
    attrs = _check_root_attributes(root_attributes)
    if schema is not None and schema is not False:
        # Validation (and inference) happen here, before the temporary file is created.
        attrs.update(_schema_attributes(schema, items, attrs))

    def write(f: BinaryIO) -> None:
        write_jld2(f, items, compress=options, producer=note, root_attributes=attrs, format_version=format)

    atomic_write(path, write, fsync=fsync)


def _append_items(
    path: PathLike,
    items: list[tuple[str, Any]],
    compress: bool | str,
    producer: str | None,
    fsync: bool,
    format: str,
) -> None:
    """:func:`save` with ``mode="a"`` on an existing file: its values re-encoded session by session
    as ``convert`` does, then ``items`` in a session of their own."""
    options = Compression.from_option(compress)
    note = default_producer() if producer is None else producer
    _check_producer(note)
    with in_file(path), File(path) as f:
        if f.format_version in FORMATS and f.format_version != format:
            raise ValueError(
                f"the file is JLD2 format {f.format_version}: append to it with format={f.format_version!r}"
            )
        objects, _, kept = _read_source(f, format, format == "0.1.1")
        if SCHEMA_ATTRIBUTE in objects.string_attributes:
            raise UnsupportedError(
                "the file embeds a schema, which the new names would not follow: save it anew (mode='w')"
            )
        stored = stored_compression(f.reader.h5.filter_pipelines_seen)
        old = len(objects.values)

        def write(out: BinaryIO) -> None:
            write_jld2(
                out,
                objects.values + items,
                compress=stored if old else options,
                producer=note,
                root_attributes=objects.string_attributes,
                empty_groups=objects.empty_groups,
                format_version=format,
                source=kept,
                sessions=[*objects.sessions, old] if old else [],
                grown_groups=[*objects.grown_groups, []],
                last_compress=options,
            )

        atomic_write(path, write, fsync=fsync)


def convert(
    source: PathLike,
    target: PathLike,
    *,
    keep_producer: bool = False,
    keep_format: bool = False,
    compress: bool | str = False,
    verify: bool = True,
    on_write: Callable[[int], None] | None = None,
) -> str:
    """Re-encode ``source`` as a JLD2 0.2.0 file at ``target`` (replaced atomically): what
    ``treexchange convert IN OUT`` does. ``source`` may also be a BSON.jl file (told by its
    content): its values, structs and all, are written as JLD2 (docs/bson.md). Returns the one-line
    summary the command prints (a second line says where and why a ``keep_format`` output is not
    byte for byte its input); ``on_write(nbytes)`` is called after each piece written (its
    progress line).

    The output is format 0.2.0 (what JLD2.jl >= 0.5 writes), whatever the input's version,
    unless ``keep_format`` keeps a format-0.1.1 input in format 0.1.1 (see ``save``'s
    ``format``; other versions are written as 0.2.0). To reproduce a file Julia wrote, the
    values are read in one reader session (an array shared by two names stays one object, hence
    one dataset) and written in the order of their object-header addresses, which is the order
    Julia wrote them in; string attributes of the root group (an embedded schema) are carried
    over. A 0.2.0 file that Julia wrote comes out byte for byte when ``keep_producer`` keeps its
    producer note (tests/test_byte_identity.py); with it, arrays JLD2 compressed are compressed
    again in JLD2's own form. A file JLD2 wrote in several sessions (``jldopen(path, "a+")``) is
    written in the same sessions (:mod:`treexchange._jld2._sessions`). With ``keep_format`` a
    0.1.1 file is written with the rules of the JLD2 release it shows
    (:mod:`treexchange._jld2._era`: all 28 0.1.1 fixtures and 679 of 715 0.1.1 files of the
    corpus come out byte for byte, docs/writing.md), and the output is compared with the input (from byte 512
    on unless ``keep_producer``): the note returned says from which byte they differ and why,
    ``None`` when they are the same (or without ``keep_format``, or with ``compress``).

    With ``verify`` (the default) the new file is read back before it replaces ``target`` and
    every value is compared with the one written (:func:`treexchange.values_equal`): a file
    that does not read back, or reads back different, raises :class:`treexchange.WriteError`
    naming the values and leaves ``target`` untouched. ``verify=False`` (``--no-verify``) skips
    that second read.

    Example:
        >>> import os, tempfile, numpy as np, treexchange
        >>> d = tempfile.mkdtemp()
        >>> src, dst = os.path.join(d, "in.jld2"), os.path.join(d, "out.jld2")
        >>> treexchange.save(src, a=np.zeros(2), producer=" (Julia 1.11.6 64-bit LE)")
        >>> print(convert(src, dst, keep_producer=True))  # doctest: +ELLIPSIS
        /.../in.jld2 -> /.../out.jld2: 1 value(s), 828 -> 828 bytes, JLD2 0.2.0, verified
        >>> open(dst, "rb").read() == open(src, "rb").read()
        True
    """
    options = Compression.from_option(compress)
    note = None
    with in_file(source):
        if sniff_bson(source):
            # A BSON.jl file: every top-level value, read in one session (a backref shared between
            # names stays one object), written as JLD2 0.2.0 in the file's order.
            with BsonFile(source) as bf:
                objects = Objects(list(bf.read().items()), [], {})
                fmt = "0.2.0"
                _write_converted(target, objects, options, default_producer(), fmt, verify, on_write, None)
        else:
            with File(source) as f:
                producer = f.producer if keep_producer else default_producer()
                fmt = f.format_version if keep_format and f.format_version == "0.1.1" else "0.2.0"
                objects, traits, kept = _read_source(f, fmt, keep_format)
                written = options
                if keep_producer and options is None and fmt == "0.2.0":
                    # Compressed again as the input was, when JLD2 compressed it (its own form).
                    written = source_compression(f.reader.h5.filter_pipelines_seen)
                _write_converted(target, objects, written, producer, fmt, verify, on_write, kept)
                if keep_format and options is None:
                    # (with the input still open: the headers it holds that reading did not
                    # reach are looked for only when the bytes differ)
                    start = 0 if keep_producer else FILE_HEADER_LENGTH
                    offset = first_difference(os.fspath(source), os.fspath(target), start)
                    if offset is not None:
                        dead = unlinked_headers(f.reader, objects.reached)
                        note = difference_note(offset, traits, kept.rules, dead)
    sizes = f"{os.path.getsize(source):,} -> {os.path.getsize(target):,} bytes"
    checked = ", verified" if verify else ""
    count = len(objects.values)
    summary = f"{os.fspath(source)} -> {os.fspath(target)}: {count} value(s), {sizes}, JLD2 {fmt}{checked}"
    return summary if note is None else f"{summary}\n{note}"


def _read_source(f: File, fmt: str, headers: bool) -> tuple[Objects, set[str], Source]:
    """A JLD2 file's values and what re-encoding it in format ``fmt`` keeps of it: the rules of
    the Julia and JLD2 releases its types (and with ``headers`` its object headers) show --
    JLD2's release rules only for a 0.1.1 file kept in 0.1.1 -- and its write sessions."""
    objects = read_objects(f)
    resolver = f.reader.types
    # The committed layouts only where the output keeps the input's format; decoded before the
    # traits are taken: a type no value uses (a field type of a type parameter) shows its writer's
    # release as well (NTuple{1,T} in the julia_type of a committed Tuple{T}: JLD2 < v0.4.41).
    layouts = committed_layouts(f.reader) if fmt == f.format_version else {}
    traits = resolver.writer_traits | header_traits(f.reader) if headers else set(resolver.writer_traits)
    rules = era_rules(traits)
    if fmt != "0.1.1":
        rules &= ANY_FORMAT_RULES
    kept = Source(
        rules,
        resolver.union_descriptions,
        type_keys(resolver.by_name_params),
        layouts=layouts,
        recommitted=(
            recommitted_keys(resolver.committed_types.values()) if objects.sessions else frozenset()
        ),
        mutable=objects.mutable_ghosts,
    )
    return objects, traits, kept


def source_compression(pipelines: frozenset[bytes]) -> Compression | None:
    """The compression ``convert --keep-producer`` writes again: JLD2.jl's own
    (:meth:`Compression.jld2`) when every filter pipeline of the input is the one JLD2 >= 0.5
    writes for ``compress=true``; none otherwise (another writer's filters are not reproduced).

    Example:
        >>> from treexchange._jld2._writer_arrays import JLD2_DEFLATE_PIPELINE
        >>> source_compression(frozenset({JLD2_DEFLATE_PIPELINE}))
        Compression(method='deflate', level=-1, chunk_bytes=1048576, jld2_form=True)
        >>> source_compression(frozenset()) is None
        True
    """
    if pipelines and pipelines == {JLD2_DEFLATE_PIPELINE}:
        return Compression.jld2()
    return None


def stored_compression(pipelines: frozenset[bytes]) -> Compression | None:
    """How ``save(mode="a")`` writes a file's arrays again: compressed as JLD2 compressed them
    (:func:`source_compression`) or as :func:`save` did (shuffle + deflate, or shuffle + zstd),
    when every filter pipeline of the file is one of those; else uncompressed.

    Example:
        >>> from treexchange._jld2 import _encode_hdf5 as enc
        >>> ours = Compression.from_option("zstd")
        >>> stored_compression(frozenset({enc.filter_pipeline(ours.filters(4))[4:]})) == ours
        True
    """
    found = source_compression(pipelines)
    if found is not None or not pipelines:
        return found
    for option in ("deflate", "zstd"):
        choice = Compression.from_option(option)
        if choice is not None:
            forms = {filter_pipeline(choice.filters(size))[4:] for size in range(1, 65)}
            if pipelines <= forms:
                return choice
    return None


def _write_converted(
    target: PathLike,
    objects: Objects,
    options: Compression | None,
    producer: str,
    fmt: str,
    verify: bool,
    on_write: Callable[[int], None] | None,
    source: Source | None,
) -> None:
    """Write ``convert``'s output atomically (read back and compared first when ``verify``)."""
    values = objects.values

    def write(out: BinaryIO) -> None:
        write_jld2(
            out,
            values,
            compress=options,
            producer=producer,
            root_attributes=objects.string_attributes,
            empty_groups=objects.empty_groups,
            format_version=fmt,
            on_write=on_write,
            source=source,
            sessions=objects.sessions,
            grown_groups=objects.grown_groups,
        )

    atomic_write(target, write, check=(lambda tmp: verify_output(tmp, values)) if verify else None)


def verify_output(path: str, written: list[tuple[str, Any]]) -> None:
    """Read ``path`` back and compare each ``(name, value)`` written with what it now holds.

    Raises :class:`WriteError` when the file cannot be read or a value differs (all such names
    are listed).

    Example:
        >>> import os, tempfile, numpy as np, treexchange
        >>> p = os.path.join(tempfile.mkdtemp(), "v.jld2")
        >>> treexchange.save(p, a=np.zeros(2))
        >>> verify_output(p, [("a", np.zeros(2))])
        >>> verify_output(p, [("a", np.ones(2))])
        Traceback (most recent call last):
        ...
        treexchange._errors.WriteError: the new file reads back different values for: a (at a)
    """
    differ: list[str] = []
    try:
        with File(path) as f:
            for name, value in written:
                node: Any = f
                for part in (p for p in name.split("/") if p):
                    node = node[part]
                if not values_equal(node.read(), value):
                    differ.append(name)
    except (TreexchangeError, KeyError) as err:
        raise WriteError(f"the new file cannot be read back: {err}") from err
    if differ:
        # The path names the first of them (so the error says where, as every error does).
        raise WriteError(
            "the new file reads back different values for: " + ", ".join(differ), path=(differ[0],)
        )


def prepare_values(items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """What ``save`` writes for each ``(name, value)``: the value as :func:`treexchange.to_julia`
    makes it (one conversion, one rule for dicts), checked before anything touches the disk.

    Refused with the tree path: cycles and names or strings without a UTF-8 form
    (:class:`ConversionError`), trees deeper than ``Limits().max_depth``
    (:class:`treexchange.LimitError`). A plain ``dict`` with ``str`` keys becomes a
    ``NamedTuple``; a :class:`treexchange.JuliaDict` (what ``load`` returns for a Julia ``Dict``)
    or a dict with other keys stays a ``Dict``.

    Example:
        >>> [(n, type(v).__name__) for n, v in prepare_values([("ps", {"weight": 1.0}), ("d", {1: 2})])]
        [('ps', 'NamedTuple'), ('d', 'JuliaDict')]
    """
    for name, _ in items:
        check_link_name(name)
    with gc_paused():  # a converted model is many lasting objects and no garbage cycles
        return convert_items(items)


def _check_producer(note: str) -> None:
    if not isinstance(note, str) or "\x00" in note:
        raise ValueError("producer must be a str without NUL characters")
    _check_utf8(note, "the producer note")
    if len(REQUIRED_FILE_HEADER.encode()) + 7 + len(note.encode("utf-8")) > FILE_HEADER_LENGTH:
        raise ValueError("producer note too long for JLD2's 512-byte header")


def _check_root_attributes(attrs: Mapping[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in (attrs or {}).items():
        if not isinstance(name, str) or not name or "\x00" in name:
            raise ValueError(f"root attribute names must be non-empty str, not {name!r}")
        if not isinstance(value, str):
            raise TypeError(f"root attribute {name!r} must be a str, not {type(value).__name__}")
        _check_utf8(name, "a root attribute name")
        _check_utf8(value, f"root attribute {name!r}")
        out[name] = value
    return out


def _check_utf8(text: str, what: str) -> None:
    """Text the file stores as UTF-8: a lone surrogate has no UTF-8 form (checked before anything
    is written)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise WriteError(
            f"{what} holds a lone surrogate ({text[err.start]!r} at character {err.start}), "
            "which has no UTF-8 form; nothing was written"
        ) from None


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
    from ._schema import GroupNode  # pydantic: only when a schema is given

    out = dict(roots)
    for name, subgroups in groups.items():
        out[name] = GroupNode(entries=_group_nodes(out[name].entries, subgroups))
    return out


__all__ = ["atomic_write", "default_producer", "remove_stale_temporaries", "save"]
