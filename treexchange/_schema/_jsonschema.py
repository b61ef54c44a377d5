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

_FREQUENT_KINDS = ("array", "namedtuple", "singleton", "number", "tuple", "struct", "vector")


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) that every treexchange schema document satisfies.

    Example:
        >>> js = json_schema()
        >>> js["$schema"], sorted(js["$defs"])[:3]
        ('https://json-schema.org/draft/2020-12/schema', ['ArrayNode', 'BoolNode', 'DictNode'])
    """
    body = _dispatch_on_kind(Schema.model_json_schema(mode="validation"))
    head = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": JSON_SCHEMA_ID,
        "title": f"treexchange state-tree schema, version {SCHEMA_VERSION}",
    }
    body.pop("title", None)
    return {**head, **body}


def _dispatch_on_kind(body: dict[str, Any]) -> dict[str, Any]:
    """Replace pydantic's ``oneOf`` node unions by one ``Node`` definition that picks the variant
    from ``kind`` with an ``if``/``then``/``else`` chain.

    With ``oneOf`` a validator checks a node against every variant, and variants that share a
    child key (``fields`` of namedtuple and struct, ``items`` of tuple and vector, ``entries`` of
    dict and group) each descend into the children: the work doubles per level of nesting. With
    the chain every node is checked against exactly one variant (``discriminator`` is an
    OpenAPI keyword that JSON Schema validators ignore).
    """
    mapping: dict[str, str] = {}

    def rewrite(data: Any) -> Any:
        if isinstance(data, dict):
            if "discriminator" in data and "oneOf" in data:
                mapping.update(data["discriminator"]["mapping"])
                rest = {k: v for k, v in data.items() if k not in ("discriminator", "oneOf")}
                return {"$ref": "#/$defs/Node", **rest}
            return {k: rewrite(v) for k, v in data.items()}
        if isinstance(data, list):
            return [rewrite(v) for v in data]
        return data

    out = rewrite(body)
    # An if/then/else chain, most frequent kinds first: a validator stops at the first match.
    order = [k for k in _FREQUENT_KINDS if k in mapping] + sorted(set(mapping) - set(_FREQUENT_KINDS))
    chain: dict[str, Any] = {"$ref": mapping[order[-1]]}
    for kind in reversed(order[:-1]):
        chain = {
            "if": {"properties": {"kind": {"const": kind}}},
            "then": {"$ref": mapping[kind]},
            "else": chain,
        }
    out["$defs"]["Node"] = {
        "description": "Any schema node: 'kind' says which of the node definitions applies.",
        "type": "object",
        "required": ["kind"],
        "properties": {"kind": {"enum": order}},
        **chain,
    }
    out["$defs"] = dict(sorted(out["$defs"].items()))
    return out


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
