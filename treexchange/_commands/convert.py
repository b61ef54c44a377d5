"""``treexchange convert IN OUT``: re-encode a JLD2 file through the value model.

The output is always JLD2 format 0.2.0 (what JLD2.jl >= 0.5 writes), whatever the input's
version. Re-encoding a 0.2.0 file that Julia wrote reproduces it byte for byte when
``--keep-producer`` keeps the input's producer note (tests/test_byte_identity.py).

To reproduce Julia's file, the values are read in one reader session (an array shared by two
names stays one object, hence one dataset) and written in the order of their object-header
addresses, which is the order Julia wrote them in. String attributes of the root group (an
embedded schema) are carried over.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, BinaryIO

from .._atomic import atomic_write
from .._errors import TreexchangeError, UnsupportedError, WriteError
from .._hdf5._model import H5Class
from .._jld2._writer import JLD2Writer
from .._jld2._writer_arrays import Compression
from .._version import default_producer


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "convert",
        help="re-encode a JLD2 file, or convert JLD2 <-> safetensors / orbax",
        description=(
            "Read IN through treexchange's value model and write it to OUT as JLD2 format 0.2.0 "
            "(atomically: OUT is replaced only when the new file is complete). When one side is a "
            "safetensors file (.safetensors, .safetensors.index.json) or an orbax checkpoint "
            "directory, convert between it and JLD2 (format by extension, or --to)."
        ),
    )
    p.add_argument("input", metavar="IN", help="file (or orbax checkpoint directory) to read")
    p.add_argument("output", metavar="OUT", help="file (or orbax checkpoint directory) to write")
    p.add_argument(
        "--to",
        choices=("jld2", "safetensors", "orbax"),
        help="format of OUT (default: from its extension; a directory or *.orbax is orbax)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the mapping (source name -> target name, shape, dtype, transform); write nothing",
    )
    p.add_argument(
        "--architecture",
        metavar="TEXT",
        help=(
            "safetensors -> JLD2: the Flux model as Flux prints it (Chain(...)); the tensors (a PyTorch "
            "state_dict) are matched to it by the layer rules and written as a Flux.loadmodel!-ready "
            "model_state"
        ),
    )
    p.add_argument(
        "--max-shard-size",
        type=_size,
        metavar="SIZE",
        help="safetensors: split into shards of at most SIZE (e.g. 5GB, 500MB) with an index file",
    )
    p.add_argument(
        "--keep-producer",
        action="store_true",
        help="keep the input's producer note (e.g. ' (Julia 1.11.1 64-bit LE)') in the header",
    )
    p.add_argument(
        "--compress",
        choices=("none", "deflate", "zstd"),
        default="none",
        help="compress numeric arrays (shuffle + deflate or zstd); default: none",
    )
    p.add_argument(
        "--no-verify",
        action="store_true",
        help="skip reading the output back and comparing it with the input's values (faster)",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from .._interop._convert import detect_format

    src_fmt = detect_format(args.input, existing=True) or "jld2"
    dst_fmt = args.to or detect_format(args.output, existing=False) or "jld2"
    if (src_fmt, dst_fmt) != ("jld2", "jld2") or args.dry_run or args.architecture:
        # Another format on one side: the format-specific converters (treexchange._interop).
        from .._interop._convert import convert_formats

        convert_formats(
            args.input,
            args.output,
            to=dst_fmt,
            dry_run=args.dry_run,
            max_shard_size=args.max_shard_size,
            architecture=args.architecture,
        )
        return 0
    compress: bool | str = False if args.compress == "none" else args.compress
    convert(
        args.input,
        args.output,
        keep_producer=args.keep_producer,
        compress=compress,
        verify=not args.no_verify,
    )
    return 0


_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KIB": 1 << 10,
    "MIB": 1 << 20,
    "GIB": 1 << 30,
}


def _size(text: str) -> int:
    """``"5GB"`` -> 5_000_000_000 (B, KB, MB, GB, KiB, MiB, GiB; no unit: bytes)."""
    t = text.strip().upper()
    digits = t.rstrip("KMGIB")
    unit = t[len(digits) :]
    try:
        value = float(digits)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if unit not in _UNITS or value <= 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}")
    return int(value * _UNITS[unit])


def convert(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    keep_producer: bool = False,
    compress: bool | str = False,
    verify: bool = True,
) -> None:
    """Re-encode ``source`` as a JLD2 0.2.0 file at ``target`` (replaced atomically).

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
        >>> convert(src, dst, keep_producer=True)
        >>> open(dst, "rb").read() == open(src, "rb").read()
        True
    """
    from .._file import File
    from .._jld2._nodes import Group
    from .._jld2._reader import Session

    options = Compression.from_option(compress)
    with File(source) as f:
        reader = f.reader
        producer = f.producer if keep_producer else default_producer()
        attributes = _root_string_attributes(reader)
        leaves: list[tuple[int, str, tuple[str, ...]]] = []
        empty_groups: list[str] = []

        # Iterative, each group once: a hard link to an ancestor (legal HDF5, a cycle) or a group
        # linked from two places cannot be written as JLD2 by treexchange's writer.
        groups_seen: dict[int, str] = {}
        pending: list[tuple[Any, str, tuple[str, ...]]] = [(f, "", ())]
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
            links = group._all()  # name -> object address, in link order
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

        leaves.sort()  # Julia allocates each top-level object header in the order it writes them
        session = Session(reader, "julia")
        # Every value first (one session: shared objects stay shared), so that the writer knows
        # every struct's layout before it commits the first type.
        values = [(name, session.load_ref(address, path)) for address, name, path in leaves]

        def write(out: BinaryIO) -> None:
            writer = JLD2Writer(out, compress=options, producer=producer, root_attributes=attributes)
            writer.prepare(values)
            for name, value in values:
                writer.write(name, value)
            for name in empty_groups:
                writer.create_group(name)
            writer.close()

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
        treexchange._errors.WriteError: the new file reads back different values for: a
    """
    from .._file import File
    from .._values import values_equal

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
        raise WriteError("the new file reads back different values for: " + ", ".join(differ))


def _root_string_attributes(reader: Any) -> dict[str, str]:
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
