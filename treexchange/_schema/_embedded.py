"""A schema stored inside a JLD2 file, and the check ``load`` runs against it.

The schema travels as a UTF-8 string attribute named ``treexchange_schema`` on the file's root
group (JSON text, compact). JLD2.jl never looks at root-group attributes when it loads values, so
Julia reads such a file exactly as before; treexchange finds the schema and checks what it loads.

Wiring (done in ``treexchange.save`` / ``treexchange.load``)::

    save(path, model_state=state, root_attributes=schema_to_attributes(schema))
    values = ...                                    # what load read
    check_loaded(file, values, name=name, validate=validate, schema=schema)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .._errors import FormatError, MismatchError
from .._limits import DEFAULT_LIMITS, Limits
from .._nodeproto import LazyFile
from .._reader import SCHEMA_ATTRIBUTE, open as open_file
from ._model import Schema
from ._validate import validate as validate_tree
from ._versions import SchemaLike, load_schema


def schema_to_attributes(schema: SchemaLike) -> dict[str, str]:
    """The root-group attributes that embed ``schema`` in a file (pass to ``save``'s
    ``root_attributes``).

    Example:
        >>> from treexchange import load_schema, schema_to_attributes
        >>> schema_to_attributes(load_schema({"schema_version": "2.1", "roots": {"flag": {"kind": "bool"}}}))
        {'treexchange_schema': '{"schema_version":"2.1","roots":{"flag":{"kind":"bool"}}}'}
    """
    return {SCHEMA_ATTRIBUTE: load_schema(schema).to_json(indent=None)}


def schema_from_attributes(
    attributes: Mapping[str, Any], *, limits: Limits = DEFAULT_LIMITS
) -> Schema | None:
    """The schema held in a root group's attributes, or ``None`` when there is none (at most
    ``limits.max_embedded_schema_chars`` of JSON text, read with ``limits``).

    Example:
        >>> schema_from_attributes({"treexchange_schema": '{"schema_version": "2.0", "roots": {}}'}).roots
        {}
        >>> schema_from_attributes({}) is None
        True
    """
    if SCHEMA_ATTRIBUTE not in attributes:
        return None
    raw = attributes[SCHEMA_ATTRIBUTE]
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"root attribute {SCHEMA_ATTRIBUTE!r} is not UTF-8 text") from None
    if hasattr(raw, "item") and not isinstance(raw, str):  # a numpy 0-d string
        raw = raw.item()
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8", errors="replace")
    if not isinstance(raw, str):
        raise FormatError(f"root attribute {SCHEMA_ATTRIBUTE!r} is not a string")
    if len(raw) > limits.max_embedded_schema_chars:
        raise FormatError(
            f"root attribute {SCHEMA_ATTRIBUTE!r} is too large "
            f"(max_embedded_schema_chars={limits.max_embedded_schema_chars})"
        )
    if not raw.lstrip().startswith("{"):
        raise FormatError(f"root attribute {SCHEMA_ATTRIBUTE!r} is not a JSON schema document")
    return load_schema(raw, limits=limits)


FileLike = str | os.PathLike[str] | bytes | bytearray | memoryview | LazyFile
"""A file as the embedded-schema functions take it: a path, the file's bytes, or an opened file."""


def read_embedded_schema(file: FileLike) -> Schema | None:
    """The schema stored in a file (a path, the file's bytes, or an opened file), or ``None``
    when it has none.

    The schema is read from the root group's attributes as :attr:`treexchange.File.attrs`
    decodes them (treexchange's own reader). A path that does not exist raises
    ``FileNotFoundError``; a file that is not JLD2 raises :class:`treexchange.WrongFormatError`.

    Example:
        >>> import os, tempfile, numpy as np
        >>> from treexchange import read_embedded_schema, save
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> save(path, a=np.zeros(2))
        >>> read_embedded_schema(path) is None
        True
        >>> save(path, a=np.zeros(2), schema=True)
        >>> read_embedded_schema(path).roots["a"].kind
        'array'
    """
    attrs = _root_attributes(file)
    return schema_from_attributes(attrs)


def _root_attributes(file: FileLike) -> Mapping[str, Any]:
    if isinstance(file, (str, os.PathLike, bytes, bytearray, memoryview)):
        source = bytes(file) if isinstance(file, (bytearray, memoryview)) else file
        with open_file(source) as opened:  # a BSON.jl file has no attributes: {}
            return opened.attrs
    if not isinstance(file, LazyFile):
        raise TypeError(f"{type(file).__name__} is neither a file path, bytes nor an opened file")
    return file.attrs


def check_loaded(
    file: FileLike | None,
    values: Any,
    *,
    name: str | None = None,
    validate: bool = True,
    schema: SchemaLike | None = None,
    order: str = "julia",
) -> Schema | None:
    """The check ``load`` runs after reading: ``values`` (what was loaded from ``file``: all
    top-level names as a dict, or the value of ``name``) against ``schema`` when given, else
    against the file's embedded schema when ``validate`` is true and there is one.

    With ``order="storage"`` the loaded arrays have reversed shapes, so the file itself (a path or
    an opened file) is checked instead, lazily. Call it before any conversion of the values (such as
    ``like=`` restoring into a PyTree). Returns the schema used (``None`` when nothing was
    checked). Raises :class:`treexchange.MismatchError` listing every violation.

    Example:
        >>> import numpy as np
        >>> from treexchange import NamedTuple, infer_schema
        >>> doc = infer_schema({"m": NamedTuple(w=np.zeros(3, np.float32))})
        >>> check_loaded(None, {"m": NamedTuple(w=np.zeros(4, np.float32))}, schema=doc)
        Traceback (most recent call last):
        ...
        treexchange._errors.MismatchError: 1 schema violation(s):
          m.w: shape (4,) found, schema expects (3,)
    """
    if schema is not None:
        doc: Schema | None = load_schema(schema)
    elif validate and file is not None:
        doc = read_embedded_schema(file)
    else:
        doc = None
    if doc is None:
        return None
    target = file if order != "julia" and file is not None else values
    found = validate_tree(target, doc, name=name)
    if found:
        raise MismatchError(found, header=f"{len(found)} schema violation(s)")
    return doc
