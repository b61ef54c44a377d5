"""A small BSON writer for tests and benchmarks: raw trees -> bytes, and BSON.jl's tagged
documents (``datatype``, ``struct``, ``array``...) built from Python values.

treexchange does not write BSON.jl files for users (JLD2 is the format it writes); this exists
so that tests can make BSON.jl-shaped files of any shape, hostile ones included, and the
benchmark a large model.

Example:
    >>> doc = {"model": struct(datatype("Main.Foo"), array("Core.Float32", np.ones((2, 3), np.float32)))}
    >>> data = bson_file(doc)
    >>> int.from_bytes(data[:4], "little") == len(data), data[-1]
    (True, 0)
"""

from __future__ import annotations

import struct as _struct
from typing import Any

import numpy as np

_TYPE_NAMES = {
    "float32": "Core.Float32",
    "float64": "Core.Float64",
    "int64": "Core.Int64",
    "int32": "Core.Int32",
    "uint8": "Core.UInt8",
    "bool": "Core.Bool",
    "float16": "Core.Float16",
}


def _element(out: bytearray, key: str, value: Any) -> None:
    k = key.encode() + b"\x00"
    if isinstance(value, dict):
        out += b"\x03" + k + encode(value)
    elif isinstance(value, (list, tuple)):
        out += b"\x04" + k + encode({str(i): v for i, v in enumerate(value)})
    elif isinstance(value, (bytes, bytearray, memoryview, np.ndarray)):
        raw = value.tobytes(order="F") if isinstance(value, np.ndarray) else bytes(value)
        out += b"\x05" + k + _struct.pack("<i", len(raw)) + b"\x00" + raw
    elif isinstance(value, (bool, np.bool_)):
        out += b"\x08" + k + (b"\x01" if value else b"\x00")
    elif isinstance(value, np.int32):
        out += b"\x10" + k + _struct.pack("<i", int(value))
    elif isinstance(value, (int, np.integer)):
        out += b"\x12" + k + _struct.pack("<q", int(value))
    elif isinstance(value, (float, np.floating)):
        out += b"\x01" + k + _struct.pack("<d", float(value))
    elif isinstance(value, str):
        s = value.encode()
        out += b"\x02" + k + _struct.pack("<i", len(s) + 1) + s + b"\x00"
    elif value is None:
        out += b"\x0a" + k
    else:
        raise TypeError(f"cannot encode {type(value).__name__}")


def encode(doc: dict[str, Any]) -> bytes:
    """One BSON document (a ``dict``: lists are BSON arrays, bytes and numpy arrays binaries)."""
    body = bytearray()
    for key, value in doc.items():
        _element(body, key, value)
    return _struct.pack("<i", len(body) + 5) + bytes(body) + b"\x00"


def bson_file(entries: dict[str, Any], backrefs: list[Any] | None = None) -> bytes:
    """A BSON.jl file: the top-level ``entries`` and, if any, the ``_backrefs`` they refer to."""
    doc = dict(entries)
    if backrefs:
        doc["_backrefs"] = list(backrefs)
    return encode(doc)


def datatype(name: str, *params: Any) -> dict[str, Any]:
    """A ``datatype`` document (``name`` dotted, as ``"Flux.Dense"``)."""
    return {"tag": "datatype", "name": name.split("."), "params": list(params)}


def struct(type_: Any, *fields: Any) -> dict[str, Any]:
    """A ``struct`` document with its fields in order."""
    return {"tag": "struct", "type": type_, "data": list(fields)}


def array(eltype: str | None, values: np.ndarray) -> dict[str, Any]:
    """An ``array`` document of a numeric numpy array (its bytes in Julia's column-major order)."""
    name = eltype or _TYPE_NAMES[values.dtype.name]
    return {"tag": "array", "type": datatype(name), "size": [int(d) for d in values.shape], "data": values}


def symbol(name: str) -> dict[str, Any]:
    return {"tag": "symbol", "name": name}


def tuple_(*items: Any) -> dict[str, Any]:
    return {"tag": "tuple", "data": list(items)}


def backref(i: int) -> dict[str, Any]:
    """A reference to ``_backrefs[i]`` (1-based)."""
    return {"tag": "backref", "ref": i}


def primitive(type_: Any, data: bytes) -> dict[str, Any]:
    """A ``struct`` document of a primitive type: its bytes as a binary (``Float32``, ``Char``)."""
    return {"tag": "struct", "type": type_, "data": data}
