"""``treexchange schema FILE [--checksums] [--values] [--name NAME]``: print a file's inferred schema.

``treexchange schema --json-schema`` prints the JSON Schema of the schema document format instead.
"""

from __future__ import annotations

import argparse
import sys


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "schema",
        help="print the inferred schema of a JLD2 or BSON.jl file (JSON)",
        description="Infer the schema of a JLD2 or BSON.jl file: every node's kind, field order, dtype and "
        "Julia-order shape. No array data is read unless --checksums is given.",
    )
    p.add_argument("file", nargs="?", help="the JLD2 or BSON.jl file")
    p.add_argument(
        "--checksums",
        action="store_true",
        help="record contents: each array's sha256 and each scalar's exact value (reads all data)",
    )
    p.add_argument("--values", action="store_true", help="pin scalar values (enum) as found")
    p.add_argument("--name", help="only this top-level name ('a/b' for a nested group)")
    p.add_argument("--description", help="description text for the document")
    p.add_argument("-o", "--output", help="write to this file instead of standard output")
    p.add_argument(
        "--json-schema",
        action="store_true",
        help="print the JSON Schema of the schema document format and exit",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .._schema import infer_schema, json_schema_text  # pydantic: the schema commands only

    if args.json_schema:
        text = json_schema_text()
    elif args.file is None:
        print("treexchange schema: a FILE is required (or --json-schema)", file=sys.stderr)
        return 2
    else:
        doc = infer_schema(
            args.file,
            name=args.name,
            checksums=args.checksums,
            values=args.values,
            description=args.description,
        )
        text = doc.to_json() + "\n"
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0
