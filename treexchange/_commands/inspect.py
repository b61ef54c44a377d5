"""``treexchange inspect FILE [--json] [NAME]``: show what a JLD2 (or BSON.jl) file holds."""

from __future__ import annotations

import argparse
import os
import sys

from .._errors import TYPE_WIDTH, UnsupportedError, in_file
from .._inspect import json_lines, text_lines
from .._reader import open as open_file

_FLAGS = {"--json": "json", "--allow-hdf5": "allow_hdf5", "--full-types": "full_types"}


FULL_TYPES_HELP = f"print Julia types whole (default: shortened to {TYPE_WIDTH} characters with …)"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "inspect",
        usage="treexchange inspect [-h] FILE [--json] [--allow-hdf5] [--full-types] [NAME]",
        help="show the tree of a JLD2 or BSON.jl file (types, Julia-order shapes, dtypes, sizes)",
        description=(
            "Print the tree of values in a JLD2 (or BSON.jl) file: one line per node with its Julia "
            "type, and for arrays the Julia-order shape, dtype and size; totals at the end. With --json, "
            "print JSON Lines (one object per node, pre-order: path, kind, julia_type; arrays: "
            "dtype, shape, sha256; numbers/bools/strings/symbols: value)."
        ),
    )
    p.add_argument("file", help="the JLD2 or BSON.jl file")
    # argparse (before Python 3.12) cannot take an optional positional after a flag
    # (``inspect FILE --json NAME``); the rest of the line is parsed in run() instead.
    p.add_argument(
        "rest", nargs=argparse.REMAINDER, metavar="[NAME]", help="only this entry (a name, or a/b)"
    )
    p.add_argument("--json", action="store_true", help="JSON Lines output (the scripting contract)")
    p.add_argument("--allow-hdf5", action="store_true", help="also read plain HDF5 files (through h5py)")
    p.add_argument("--full-types", action="store_true", help=FULL_TYPES_HELP)
    p.set_defaults(func=run)


def _split_rest(args: argparse.Namespace) -> str | None:
    names = []
    for token in args.rest:
        if token in _FLAGS:
            setattr(args, _FLAGS[token], True)
        elif token.startswith("--"):
            raise SystemExit(f"treexchange inspect: unknown option {token}")
        else:
            names.append(token)
    if len(names) > 1:
        raise SystemExit("treexchange inspect: give at most one NAME")
    return names[0] if names else None


def run(args: argparse.Namespace) -> int:
    name = _split_rest(args)
    if os.path.isdir(args.file):  # (was "[Errno 21] Is a directory", not saying what to do instead)
        raise UnsupportedError(
            f"{args.file} is a directory: inspect reads a JLD2 or BSON.jl file "
            "(the arrays of an orbax checkpoint: treexchange convert DIR OUT.jld2 --dry-run)"
        )
    with in_file(args.file), open_file(args.file, allow_hdf5=args.allow_hdf5) as f:
        width = None if args.full_types else TYPE_WIDTH
        lines = json_lines(f, name) if args.json else text_lines(f, name, type_width=width)
        out = sys.stdout
        for line in lines:
            out.write(line + "\n")
    return 0
