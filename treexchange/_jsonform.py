"""How a leaf is written in JSON: a scalar's ``value`` and an array's ``sha256``.

One implementation for both places that print them, ``inspect --json`` (:mod:`treexchange._inspect`)
and schema documents (:mod:`treexchange._schema`): a value inferred into a schema's ``enum`` is
spelled as ``inspect --json`` prints it, and an array's digest in a schema is the one ``inspect``
shows.

Scalars (:func:`json_scalar`):

* ``Bool``: ``true`` / ``false``; numbers that fit 64 bits: JSON numbers;
* integers wider than that, and every value of a type wider than 64 bits (``Int128``,
  ``UInt128``, ``BigInt``): decimal strings. JSON parsers commonly read numbers as doubles or
  64-bit integers, so a bigger number would silently change on the way;
* ``BigFloat``: its decimal text, as the file holds it (a double would round it);
* ``NaN`` and the infinities (JSON has no literal for them): the strings ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"``; a ``Float32`` / ``Float16`` / ``BFloat16`` as the shortest
  decimal that reads back as the same value (``0.1`` for ``0.1f0``);
* complex numbers: ``[re, im]`` of those;
* primitive bits types with no numpy dtype (``Char``, ``@enum`` values): their bytes as a
  little-endian signed integer;
* ``String`` / ``Symbol``: the text (a Symbol without its ``:``).

Arrays (:func:`array_sha256`): the hex sha256 of the elements in Julia's column-major order,
little-endian: exactly the bytes JLD2 stores for an uncompressed array, so a file's array and the
same array held in Python in Julia's shape (an F-ordered numpy array) have one digest.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import numpy as np

from ._errors import LimitError
from ._juliatype import JuliaType, is_bigint_name
from ._values import BigFloat, BigInt, Int128, JuliaBits, UInt128

_INT64_MIN, _UINT64_END = -(2**63), 2**64
_WIDE_INTEGER_TYPES = frozenset({"Core.Int128", "Int128", "Core.UInt128", "UInt128"})


def json_scalar(value: Any, julia_type: JuliaType | str | None = None) -> Any:
    """The JSON form of a number, ``Bool``, ``String`` or ``Symbol`` value (see the module docstring).

    ``julia_type`` (a :class:`JuliaType` or its printed text) matters for a plain ``int`` only:
    a value of a ``BigInt`` type (any of its names) is a decimal string however small, as is a
    :class:`treexchange.BigInt`.

    Raises:
        LimitError: an integer too long for Python's int-to-text conversion (about 4300 digits;
            the reader refuses such BigInts already, a value built in Python may still be one).

    Example:
        >>> json_scalar(np.float32(0.1)), json_scalar(float("nan")), json_scalar(np.complex64(1 + 2j))
        (0.1, 'NaN', [1.0, 2.0])
        >>> json_scalar(Int128(5)), json_scalar(2**64), json_scalar(2**64 - 1), json_scalar(5, "BigInt")
        ('5', '18446744073709551616', 18446744073709551615, '5')
        >>> json_scalar(BigInt(7)), json_scalar(7, "Base.GMP.BigInt"), json_scalar(BigFloat("1.0e+400"))
        ('7', '7', '1.0e+400')
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (Int128, UInt128, BigInt)):
        return _decimal(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, int):
        if _INT64_MIN <= value < _UINT64_END and not _is_wide(julia_type):
            return value
        return _decimal(value)
    if isinstance(value, (complex, np.complexfloating)):
        return [_float(value.real), _float(value.imag)]
    if isinstance(value, (float, np.floating)) or _is_ml_float(value):
        return _float(value)
    if isinstance(value, JuliaBits):
        return value.as_int()
    if isinstance(value, BigFloat):
        return value.text  # its decimal text, every digit (a double would round it)
    return str(value)


def _is_wide(julia_type: JuliaType | str | None) -> bool:
    if julia_type is None:
        return False
    name = julia_type if isinstance(julia_type, str) else julia_type.name
    return name in _WIDE_INTEGER_TYPES or is_bigint_name(name)


def _decimal(value: int) -> str:
    try:
        return str(int(value))
    except ValueError:
        bits = value.bit_length()
        raise LimitError(f"integer of {bits} bits is too long to print as decimal text") from None


def _float(x: Any) -> float | str:
    f = float(x)
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "Infinity" if f > 0 else "-Infinity"
    if isinstance(x, np.generic) and x.dtype.itemsize < 8:
        # The shortest decimal that rounds back to the same narrow float reads better than the
        # float64 expansion (0.1 rather than 0.10000000149011612 for 0.1f0).
        try:
            short = float(str(x))
        except ValueError:
            return f
        if np.array(short, dtype=x.dtype) == x:
            return short
    return f


def _is_ml_float(value: Any) -> bool:
    # ml_dtypes scalars (bfloat16, float8 ...) are np.generic but not np.floating.
    return isinstance(value, np.generic) and value.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2")


# Hash big arrays that are not already column-major in slabs of about this many bytes, so the
# temporary copy stays small.
_SLAB_BYTES = 16 << 20


def array_sha256(array: Any) -> str:
    """Hex sha256 of ``array``'s elements in column-major order, little-endian.

    Example:
        >>> a = np.arange(6, dtype="<i4").reshape(2, 3)  # Julia [0 2 4; 1 3 5]
        >>> array_sha256(a) == hashlib.sha256(a.tobytes(order="F")).hexdigest()
        True
        >>> array_sha256(np.asfortranarray(a)) == array_sha256(a.astype(">i4"))
        True
    """
    a = np.asarray(array)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and np.little_endian is False):
        a = a.astype(a.dtype.newbyteorder("<"))
    h = hashlib.sha256()
    if a.size == 0:
        return h.hexdigest()
    if a.ndim <= 1 or a.flags.f_contiguous:
        # The transpose of a column-major array is row-major contiguous: hash it without a copy.
        h.update(np.ascontiguousarray(a.T).reshape(-1).view(np.uint8).data)
        return h.hexdigest()
    # Column-major order = the last Julia axis varies slowest: hash one block of it at a time.
    per_slice = max(1, a[..., 0].nbytes)
    step = max(1, _SLAB_BYTES // per_slice)
    for start in range(0, a.shape[-1], step):
        block = np.asfortranarray(a[..., start : start + step])
        h.update(np.ascontiguousarray(block.T).reshape(-1).view(np.uint8).data)
    return h.hexdigest()


# Characters a JSON string may hold raw but that ``str.splitlines`` and many line readers take for
# a line break: escaped in JSON Lines output so that one record stays one line for every reader.
_LINE_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def json_line(record: Any, *, allow_nan: bool = False) -> str:
    r"""One JSON Lines record: ``json.dumps`` (UTF-8 text kept) with every character a line reader
    may split on escaped, so the record is one line for ``str.splitlines`` too.

    Example:
        >>> print(json_line({"value": "a\u2028b\x85c"}))
        {"value": "a\u2028b\u0085c"}
        >>> len(json_line({"value": "a\u2028b"}).splitlines())
        1
    """
    return json.dumps(record, ensure_ascii=False, allow_nan=allow_nan).translate(_LINE_BREAKS)
