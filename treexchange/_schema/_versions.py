"""Reading schema documents of any version: refuse newer majors, migrate older versions.

Versions are ``MAJOR.MINOR``. A reader accepts its own major version; a newer *minor* version of it
is read with a warning, ignoring keys it does not know (minor versions only add optional keys). A
newer *major* version is refused with both versions named. Older versions are brought up to date
by the registered migrations, one step at a time (``0.9`` → ``1.0`` → ``2.0`` → ``2.1``), each a
function from the old document's JSON data to the next version's.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from .._errors import FormatError, UnsupportedError
from .._gc import gc_paused
from .._limits import DEFAULT_LIMITS, Limits
from ._model import SCHEMA_VERSION, Schema

SchemaLike = Schema | str | os.PathLike[str] | Mapping[str, Any] | bytes
"""What the operations accept as a schema: a document, a JSON file path, JSON text or JSON data."""

Migration = Callable[[dict[str, Any]], dict[str, Any]]

_MIGRATIONS: dict[str, tuple[str, Migration]] = {}
_VERSION = re.compile(r"^(\d+)\.(\d+)$")


def register_migration(from_version: str, to_version: str) -> Callable[[Migration], Migration]:
    """Register a function that turns a ``from_version`` document (JSON data) into ``to_version``.

    Example:
        >>> sorted(k for k in _MIGRATIONS)
        ['0.9', '1.0', '2.0']
    """

    def decorator(func: Migration) -> Migration:
        _MIGRATIONS[from_version] = (to_version, func)
        return func

    return decorator


def parse_version(text: Any) -> tuple[int, int]:
    """``"1.0"`` → ``(1, 0)``; FormatError for anything else.

    Example:
        >>> parse_version("1.12")
        (1, 12)
    """
    m = _VERSION.match(text) if isinstance(text, str) else None
    if m is None:
        raise FormatError(f"schema version must be 'MAJOR.MINOR' text, not {text!r}")
    return int(m.group(1)), int(m.group(2))


def document_version(data: Mapping[str, Any]) -> str:
    """The version a JSON document declares (``schema_version``, or ``format_version`` in 0.9)."""
    for key in ("schema_version", "format_version"):
        if key in data:
            version = data[key]
            parse_version(version)
            return str(version)
    raise FormatError("not a treexchange schema document: no 'schema_version'")


def load_schema(source: SchemaLike, *, limits: Limits = DEFAULT_LIMITS) -> Schema:
    """A :class:`Schema` from a document, a JSON file path, JSON text or JSON data, migrated to the
    current version.

    ``limits`` bounds what is read: a file of at most ``max_schema_bytes`` (a schema document is
    metadata; nothing huge is slurped), trees at most ``max_schema_depth`` levels deep.

    Raises:
        UnsupportedError: the document has a newer major version, or an older one with no
            migration path.
        FormatError: the document is not valid JSON, does not match the format, or exceeds
            ``limits``.

    Example:
        >>> from treexchange import load_schema
        >>> load_schema('{"schema_version": "2.1", "roots": {"x": {"kind": "bool"}}}').roots["x"].kind
        'bool'
        >>> load_schema({"schema_version": "3.0", "roots": {}})
        Traceback (most recent call last):
        ...
        treexchange._errors.UnsupportedError: schema document version 3.0 is newer than this reader's 2.1 ...
    """
    if isinstance(source, Schema):
        return source
    data = _json_data(source, limits)
    version = document_version(data)
    major, minor = parse_version(version)
    cur_major, cur_minor = parse_version(SCHEMA_VERSION)
    context: dict[str, Any] = {"limits": limits}
    if major > cur_major:
        raise UnsupportedError(
            f"schema document version {version} is newer than this reader's {SCHEMA_VERSION} "
            f"(a new major version); upgrade treexchange to read it"
        )
    if major == cur_major and minor > cur_minor:
        warnings.warn(
            f"schema document version {version} is newer than this reader's {SCHEMA_VERSION}; "
            "keys this version does not know are ignored",
            stacklevel=2,
        )
        context["ignore_unknown_keys"] = True
    elif (major, minor) < (cur_major, cur_minor):
        if major < cur_major and minor > 0 and version not in _MIGRATIONS and f"{major}.0" in _MIGRATIONS:
            # A later minor of an older major (1.7, from a newer 1.x writer): its additions are
            # optional keys, so it migrates as its major's .0 does, its unknown keys ignored.
            warnings.warn(
                f"schema document version {version} is a newer minor of {major}.0; keys {major}.0 "
                "does not know are ignored",
                stacklevel=2,
            )
            context["ignore_unknown_keys"] = True
            data = {**data, "schema_version": f"{major}.0"}
        data = migrate(data)
    try:
        with gc_paused():  # tens of thousands of new objects, all kept: collecting them is wasted time
            return Schema.model_validate(data, context=context)
    except ValidationError as err:
        raise FormatError(f"invalid schema document: {_first_errors(err)}") from None


def migrate(data: Mapping[str, Any]) -> dict[str, Any]:
    """Bring an older document's JSON data up to the current version through the registered steps.

    Example:
        >>> old = {"format_version": "0.9", "trees": {"n": {"type": "scalar", "dtype": "int64"}}}
        >>> migrate(old)
        {'schema_version': '2.1', 'roots': {'n': {'kind': 'number', 'dtype': 'int64'}}}
    """
    out = dict(data)
    version = document_version(out)
    seen: set[str] = set()
    while parse_version(version) < parse_version(SCHEMA_VERSION):
        if version in seen or version not in _MIGRATIONS:
            raise UnsupportedError(
                f"schema document version {version} is older than this reader's {SCHEMA_VERSION} "
                f"and no migration from it is registered (known: {', '.join(sorted(_MIGRATIONS)) or 'none'})"
            )
        seen.add(version)
        target, step = _MIGRATIONS[version]
        try:
            out = step(out)
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as err:
            raise FormatError(f"cannot migrate schema version {version} to {target}: {err!r}") from None
        version = document_version(out)
        if version != target:
            raise FormatError(f"migration from {target} produced version {version}")  # pragma: no cover
    return out


def _json_data(source: Any, limits: Limits) -> dict[str, Any]:
    if isinstance(source, Mapping):
        return dict(source)
    if isinstance(source, bytes):
        text = source.decode("utf-8", errors="strict")
    elif isinstance(source, str) and source.lstrip().startswith("{"):
        text = source
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            if path.stat().st_size > limits.max_schema_bytes:
                most = limits.max_schema_bytes
                raise FormatError(f"{path} is too large to be a schema document (max_schema_bytes={most})")
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise FormatError(f"cannot read schema {path}: {err.strerror or err}") from None
        except UnicodeDecodeError:
            raise FormatError(f"{path} is not UTF-8 JSON") from None
    else:
        raise TypeError(f"expected a Schema, a path, JSON text or a dict, not {type(source).__name__}")
    deepest = 4 * limits.max_schema_depth + 32  # a document nests at most 3 JSON levels per tree level
    if _json_nesting(text) > deepest:
        raise FormatError(
            f"schema JSON is nested more than {deepest} levels deep "
            f"(max_schema_depth={limits.max_schema_depth})"
        )
    try:
        with gc_paused():
            data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as err:
        raise FormatError(f"schema is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise FormatError("a schema document is a JSON object")
    return data


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')


def _json_nesting(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text`` (brackets inside strings not
    counted), found without parsing: ``json.loads`` recurses once per level in C, bounded only
    by the interpreter's recursion limit, which a caller may have raised far beyond what the
    C stack holds (a deep document then crashes the process instead of raising).

    Example:
        >>> _json_nesting('{"a": [[1], {"b": "[[["}]}')
        3
    """
    raw = np.frombuffer(_JSON_STRING.sub('""', text).encode("utf-8", "surrogatepass"), dtype=np.uint8)
    return int(np.cumsum(_BRACKET_STEP[raw], dtype=np.int64).max(initial=0))


_BRACKET_STEP = np.zeros(256, dtype=np.int8)
_BRACKET_STEP[[ord("["), ord("{")]] = 1
_BRACKET_STEP[[ord("]"), ord("}")]] = -1


def _first_errors(err: ValidationError, limit: int = 5) -> str:
    parts = []
    for e in err.errors()[:limit]:
        where = ".".join(str(p) for p in e.get("loc", ()))
        parts.append(f"{where}: {e.get('msg')}")
    more = err.error_count() - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


# --- 0.9 -> 1.0 ---------------------------------------------------------------------------------
#
# 0.9 was the pre-release layout (see docs/schema.md, "Version 0.9"): "format_version", "generator"
# (a string) and "trees"; a node named its kind in "type" with different kind names, kept field
# order only through JSON object key order, said "dims" with "?" for a free dimension, and put
# every scalar under one "scalar" kind distinguished by its dtype.

_SCALAR_KINDS = {"bool": "bool", "string": "string", "symbol": "symbol"}
_EMPTY_TYPES = {"()": "Tuple{}", "nothing": "Nothing", "missing": "Missing"}


@register_migration("0.9", "1.0")
def _migrate_0_9(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"schema_version": "1.0"}
    generator = data.get("generator")
    if isinstance(generator, str) and generator:
        name, _, version = generator.partition(" ")
        out["producer"] = {"name": name, **({"version": version} if version else {})}
    if data.get("doc") is not None:
        out["description"] = data["doc"]
    out["roots"] = {str(k): _node_0_9(v) for k, v in data.get("trees", {}).items()}
    return out


def _node_0_9(node: Mapping[str, Any]) -> dict[str, Any]:
    old = node["type"]
    new: dict[str, Any]
    if old in ("record", "struct"):
        new = {"kind": "namedtuple" if old == "record" else "struct"}
        if old == "struct":
            new["type"] = node["julia_type"]
        new["fields"] = [{"name": str(k), "node": _node_0_9(v)} for k, v in node.get("fields", {}).items()]
    elif old in ("tuple", "list"):
        new = {"kind": "tuple" if old == "tuple" else "vector"}
        new["items"] = [_node_0_9(v) for v in node.get("elements", [])]
    elif old in ("dict", "group"):
        new = {"kind": old}
        members = node.get("entries" if old == "dict" else "members", {})
        new["entries"] = {str(k): _node_0_9(v) for k, v in members.items()}
    elif old == "tensor":
        new = {"kind": "array"}
        if "dtype" in node:
            new["dtype"] = node["dtype"]
        if "dims" in node:
            new["shape"] = [None if d == "?" else d for d in node["dims"]]
        if "sha256" in node:
            new["sha256"] = node["sha256"]
    elif old == "scalar":
        dtype = node.get("dtype")
        kind = _SCALAR_KINDS.get(str(dtype), "number")
        new = {"kind": kind}
        if kind == "number" and dtype is not None:
            new["dtype"] = dtype
        if "choices" in node:
            new["enum"] = list(node["choices"])
        if "min" in node:
            new["minimum"] = node["min"]
        if "max" in node:
            new["maximum"] = node["max"]
    elif old == "empty":
        of = str(node.get("of", "()"))
        new = {"kind": "singleton", "type": _EMPTY_TYPES.get(of, of)}
    else:
        raise ValueError(f"unknown 0.9 node type {old!r}")
    if node.get("doc") is not None:
        new["description"] = node["doc"]
    return new


# --- 1.0 -> 2.0 ---------------------------------------------------------------------------------
#
# 2.0 adds the node kind "ref" (a back-reference to an earlier path: cycles and shared mutable
# objects). A new kind is not an optional key, which is all a minor version may add (a 1.x reader
# cannot read a document holding one), hence a new major version. Every 1.0 document is a 2.0
# document as it stands: only the version changes.


@register_migration("1.0", "2.0")
def _migrate_1_0(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": "2.0"}


# --- 2.0 -> 2.1 ---------------------------------------------------------------------------------
#
# 2.1 adds the optional key "value" to number, bool, string and symbol nodes: the exact content
# recorded with checksums (as "sha256" is an array's), so that diff and validate compare scalars'
# contents too. An optional key is what a minor version may add: a 2.0 reader reads a 2.1 document
# (with a warning), ignoring it. Every 2.0 document is a 2.1 document as it stands.


@register_migration("2.0", "2.1")
def _migrate_2_0(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "schema_version": "2.1"}
