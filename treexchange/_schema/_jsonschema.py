"""The JSON Schema of the schema document format, generated from the pydantic models.

The committed copy is ``schema/treexchange-schema.json``; a test regenerates it and fails when it
drifts. Regenerate with::

    treexchange schema --json-schema -o schema/treexchange-schema.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._model import SCHEMA_VERSION, Schema

JSON_SCHEMA_ID = f"urn:treexchange:schema:{SCHEMA_VERSION}"
"""The ``$id`` of the generated JSON Schema (one per document version)."""


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) that every treexchange schema document satisfies.

    Example:
        >>> js = json_schema()
        >>> js["$schema"], sorted(js["$defs"])[:3]
        ('https://json-schema.org/draft/2020-12/schema', ['ArrayNode', 'BoolNode', 'DictNode'])
    """
    body = Schema.model_json_schema(mode="validation")
    head = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": JSON_SCHEMA_ID,
        "title": f"treexchange state-tree schema, version {SCHEMA_VERSION}",
    }
    body.pop("title", None)
    return {**head, **body}


def json_schema_text() -> str:
    """:func:`json_schema` as the committed text (2-space indent, trailing newline)."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Write the JSON Schema to the path given (or print it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    text = json_schema_text()
    if args:
        Path(args[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
