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

import io
import os
from collections.abc import Mapping
from typing import Any

from .._errors import FormatError, MismatchError
from ._model import Schema
from ._validate import validate as validate_tree
from ._versions import SchemaLike, load_schema

SCHEMA_ATTRIBUTE = "treexchange_schema"
"""Name of the root-group attribute that holds a file's schema (JSON text)."""

_MAX_ATTRIBUTE_CHARS = 64 << 20


def schema_to_attributes(schema: SchemaLike) -> dict[str, str]:
    """The root-group attributes that embed ``schema`` in a file (pass to ``save``'s
    ``root_attributes``).

    Example:
        >>> from treexchange._schema._model import BoolNode
        >>> schema_to_attributes(Schema(roots={"flag": BoolNode()}))
        {'treexchange_schema': '{"schema_version":"1.0","roots":{"flag":{"kind":"bool"}}}'}
    """
    return {SCHEMA_ATTRIBUTE: load_schema(schema).to_json(indent=None)}


def schema_from_attributes(attributes: Mapping[str, Any]) -> Schema | None:
    """The schema held in a root group's attributes, or ``None`` when there is none.

    Example:
        >>> schema_from_attributes({"treexchange_schema": '{"schema_version": "1.0", "roots": {}}'}).roots
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
    if len(raw) > _MAX_ATTRIBUTE_CHARS:
        raise FormatError(f"root attribute {SCHEMA_ATTRIBUTE!r} is too large")
    if not raw.lstrip().startswith("{"):
        raise FormatError(f"root attribute {SCHEMA_ATTRIBUTE!r} is not a JSON schema document")
    return load_schema(raw)


def read_embedded_schema(file: Any) -> Schema | None:
    """The schema stored in a file (path or opened file), or ``None`` when it has none.

    Root-group attributes are taken from the opened file when it exposes them (``attrs``);
    otherwise they are read with h5py from the file's path or bytes (h5py reads every JLD2 file's
    root group). A ``File`` opened from bytes has no path, hence no schema found this way.

    Example:
        >>> read_embedded_schema(_example_file()) is None
        True
    """
    attrs = _root_attributes(file)
    return None if attrs is None else schema_from_attributes(attrs)


def _example_file() -> str:
    """A JLD2 file without a schema (for the docstring example)."""
    import tempfile

    from .._file import _demo_bytes

    path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
    with open(path, "wb") as f:
        f.write(_demo_bytes())
    return path


def _root_attributes(file: Any) -> Mapping[str, Any] | None:
    for name in ("root_attributes", "attrs", "attributes"):
        attrs = getattr(file, name, None)
        if callable(attrs):
            attrs = attrs()
        if isinstance(attrs, Mapping):
            return attrs
    if isinstance(file, (bytes, bytearray, memoryview)):
        return _h5py_root_attributes(io.BytesIO(file), "<bytes>")
    path = file if isinstance(file, (str, os.PathLike)) else getattr(file, "filename", None)
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        return None  # a File opened from bytes: no path to read the attributes from
    return _h5py_root_attributes(os.fspath(path), os.fspath(path))


def _h5py_root_attributes(source: Any, label: str) -> dict[str, Any]:
    import h5py  # only for this fallback: the codec itself never needs h5py

    try:
        with h5py.File(source, "r") as f:
            if SCHEMA_ATTRIBUTE not in f.attrs:
                return {}
            return {SCHEMA_ATTRIBUTE: f.attrs[SCHEMA_ATTRIBUTE]}
    except (OSError, KeyError, TypeError, ValueError) as err:
        raise FormatError(f"cannot read the root attributes of {label}: {err}") from None


def check_loaded(
    file: Any,
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
