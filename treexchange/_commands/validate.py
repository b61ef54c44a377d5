"""``treexchange validate FILE [SCHEMA]``: check a file against a schema, listing every violation.

Exit code 0 when the file conforms, 1 when it does not (every violation printed, one per line:
``path: kind message``), 2 on errors. Without SCHEMA, the schema embedded in the file is used.
"""

from __future__ import annotations

import argparse
import sys

from .._jsonform import json_line
from .inspect import FULL_TYPES_HELP


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "validate",
        help="check a JLD2 or BSON.jl file against a schema (exit 1 listing every violation)",
        description="Check a JLD2 or BSON.jl file against a schema document. Every violation is listed with "
        "its path; exit code 1 when there is any.",
    )
    p.add_argument("file", help="the JLD2 or BSON.jl file")
    p.add_argument("schema", nargs="?", help="schema JSON file (default: the schema stored in FILE)")
    p.add_argument("--name", help="only this top-level name ('a/b' for a nested group)")
    p.add_argument(
        "--no-checksums",
        action="store_true",
        help="do not verify recorded contents (array sha256s, scalar values)",
    )
    p.add_argument("--json", action="store_true", help="JSON Lines: one violation object per line")
    p.add_argument("--full-types", action="store_true", help=FULL_TYPES_HELP)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._schema import read_embedded_schema, validate  # pydantic: the schema commands only

    schema = args.schema
    source = args.schema
    if schema is None:
        schema = read_embedded_schema(args.file)
        source = "the schema stored in the file"
        if schema is None:
            print(f"treexchange validate: {args.file} holds no schema; give a SCHEMA file", file=sys.stderr)
            return 2
    found = validate(args.file, schema, name=args.name, checksums=not args.no_checksums)
    if args.json:
        for m in found:
            print(json_line(m.to_json(), allow_nan=True))
    else:
        for m in found:
            print(m.text(full_types=args.full_types))
        if found:
            print(f"{args.file}: {len(found)} violation(s) of {source}", file=sys.stderr)
        else:
            print(f"{args.file}: valid ({source})")
    return 1 if found else 0
