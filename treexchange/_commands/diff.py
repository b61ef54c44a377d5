"""``treexchange diff A B [--json]``: compare two files or schemas.

A and B are each a JLD2 file (its inferred schema is compared) or a schema JSON file. Exit code 0
when they are the same, 1 when they differ, 2 on errors.
"""

from __future__ import annotations

import argparse
import json
import sys

from .inspect import FULL_TYPES_HELP


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "diff",
        help="compare two JLD2 or BSON.jl files or schema documents",
        description="Compare the structure of two JLD2 or BSON.jl files or schema JSON documents: added and "
        "removed nodes, kind, type, field order, dtype, shape, checksum and value-constraint changes.",
    )
    p.add_argument("a", help="JLD2 or BSON.jl file, or schema JSON")
    p.add_argument("b", help="JLD2 or BSON.jl file, or schema JSON")
    p.add_argument("--json", action="store_true", help="print the differences as one JSON object")
    p.add_argument("--checksums", action="store_true", help="also compare array contents (sha256)")
    p.add_argument("--name", help="only this top-level name")
    p.add_argument("--full-types", action="store_true", help=FULL_TYPES_HELP)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._schema import diff  # pydantic: imported by the schema commands only

    result = diff(args.a, args.b, checksums=args.checksums, name=args.name)
    if args.json:
        print(json.dumps(result.to_json(), ensure_ascii=False, indent=2))
    else:
        sys.stdout.write(result.text(full_types=args.full_types))
    return 1 if result else 0
