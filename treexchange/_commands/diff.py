"""``treexchange diff A B [--checksums] [--json]``: compare two files or schemas.

A and B are each a JLD2 or BSON.jl file (its inferred schema is compared) or a schema JSON file.
Plain ``diff`` compares structure; ``--checksums`` compares contents too (array sha256s, every
scalar's exact value). Exit code 0 when they are the same, 1 when they differ, 2 on errors.
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
        description="Compare two JLD2 or BSON.jl files or schema JSON documents. Without --checksums the "
        "comparison is of STRUCTURE only: added and removed nodes, kind, type, field order, dtype, shape "
        "and value-constraint changes (plus the contents a schema document records); two files that "
        "differ only in values report no differences. With --checksums it is of CONTENTS too: every "
        "array's sha256 and every number's, Bool's, String's and Symbol's exact value (NaNs by their "
        "bits). Exit status 0 when equal, 1 when they differ, 2 on errors.",
    )
    p.add_argument("a", help="JLD2 or BSON.jl file, or schema JSON")
    p.add_argument("b", help="JLD2 or BSON.jl file, or schema JSON")
    p.add_argument("--json", action="store_true", help="print the differences as one JSON object")
    p.add_argument(
        "--checksums",
        action="store_true",
        help="compare contents too: array data (sha256) and every scalar's value (numbers, Bool, String, "
        "Symbol); without it only structure is compared",
    )
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
