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

from .._errors import TreexchangeError, UnsupportedError
from .._hdf5._model import H5Class
from .._jld2._writer import JLD2Writer
from .._jld2._writer_arrays import Compression
from .._save import atomic_write, default_producer


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "convert",
        help="re-encode a JLD2 file (any format version) as JLD2 format 0.2.0",
        description=(
            "Read IN through treexchange's value model and write it to OUT as JLD2 format 0.2.0 "
            "(atomically: OUT is replaced only when the new file is complete)."
        ),
    )
    p.add_argument("input", metavar="IN", help="JLD2 file to read")
    p.add_argument("output", metavar="OUT", help="JLD2 file to write")
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
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    compress: bool | str = False if args.compress == "none" else args.compress
    convert(args.input, args.output, keep_producer=args.keep_producer, compress=compress)
    return 0


def convert(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    keep_producer: bool = False,
    compress: bool | str = False,
) -> None:
    """Re-encode ``source`` as a JLD2 0.2.0 file at ``target`` (replaced atomically).

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

        def write(out: BinaryIO) -> None:
            writer = JLD2Writer(out, compress=options, producer=producer, root_attributes=attributes)
            for address, name, path in leaves:
                writer.write(name, session.load_ref(address, path))
            for name in empty_groups:
                writer.create_group(name)
            writer.close()

        atomic_write(target, write)


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
