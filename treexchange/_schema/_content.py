"""The recorded content of a scalar leaf (schema 2.1 ``value``): exact, and compared exactly.

An array's content is its ``sha256``; a number's, ``Bool``'s, ``String``'s or ``Symbol``'s is its
``value``, written as ``inspect --json`` writes a value (:func:`treexchange._jsonform.json_scalar`)
with one refinement so that equal text means equal bits: a NaN is ``"NaN"`` only when it is its
type's standard quiet NaN (Julia's ``NaN``, ``NaN32``, ``NaN16``; sign bit clear, no payload), and
otherwise its bits in hex, ``"NaN(0xfff8000000000000)"`` (x86's ``0.0 / 0.0`` has the sign bit
set). Zero-size values (``()``, ``nothing``, activation functions) are their type, already compared.

Recorded values compare by content, not as ``==`` would: ``-0.0`` and ``0.0`` differ, as do NaNs of
other bits; ``1`` and ``1.0`` are the same content (the dtype tells the types apart).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._jsonform import json_scalar
from .._juliatype import _short
from .._values import JuliaBits
from ._scalars import format_value

_SHOWN_CHARS = 60
"""Longest text of a value in a one-line message (``--json`` carries the whole value)."""


def content_value(value: Any, julia_type: Any = None) -> Any:
    """The JSON form of a scalar's exact content (see the module docstring).

    Example:
        >>> import struct
        >>> negative_nan = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000))[0]
        >>> content_value(float("nan")), content_value(negative_nan), content_value(np.float16(0.1))
        ('NaN', 'NaN(0xfff8000000000000)', 0.1)
        >>> content_value(np.complex64(complex(1, float("nan")))), content_value("relu")
        ([1.0, 'NaN'], 'relu')
    """
    if isinstance(value, (complex, np.complexfloating)):
        return [_part(value.real), _part(value.imag)]
    if _is_nan(value):
        return _nan_text(value)
    return json_scalar(value, julia_type)


def _part(x: Any) -> Any:
    return _nan_text(x) if _is_nan(x) else json_scalar(x)


def _is_nan(x: Any) -> bool:
    if isinstance(x, float) or (isinstance(x, np.generic) and x.dtype.kind not in "iubcSUOMm"):
        try:
            return math.isnan(float(x))
        except (TypeError, ValueError):
            return False
    return False


def _nan_text(x: Any) -> str:
    a = np.asarray(x)  # a Python float is a float64
    unsigned = f"u{a.dtype.itemsize}"
    bits = int(a.view(unsigned)[()])
    standard = int(np.array(np.nan, dtype=a.dtype).view(unsigned)[()])
    return "NaN" if bits == standard else f"NaN(0x{bits:0{2 * a.dtype.itemsize}x})"


def same_content(a: Any, b: Any) -> bool:
    """Whether two recorded values (JSON forms, ``None`` when not recorded) are the same content.

    Example:
        >>> same_content(1.5, 1.5), same_content(-0.0, 0.0), same_content(1, 1.0), same_content(True, 1)
        (True, False, True, False)
        >>> same_content("NaN", "NaN(0x7ff8000000000001)"), same_content([1.0, 2.0], [1.0, 2.0])
        (False, True)
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_content(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return type(a) is type(b) and a == b


def shown_value(
    encoded: Any, *, number: bool = False, julia_type: str | None = None, size: int | None = None
) -> str:
    """A recorded value as message text, shortened to about 60 characters with "…".

    A ``number``'s text forms (``Int128`` / ``BigInt`` decimals, ``BigFloat`` text, NaNs) are shown
    bare; a ``String``'s or ``Symbol``'s in quotes. A value of a Julia bits type with no numpy dtype
    (a ``Char``, an ``@enum``, a pointer, a primitive type: ``julia_type`` names it, ``size`` is
    its byte count) is recorded as the integer its bytes make, as ``inspect --json`` writes it, and
    shown as ``inspect`` shows it (:func:`bits_shown`): ``'a'``, ``0x00000002``.

    Example:
        >>> shown_value(2.5), shown_value(None), shown_value("x" * 100)[-16:]
        ('2.5', 'none', 'xxx… (100 chars)')
        >>> shown_value("NaN(0x7fc00001)", number=True), shown_value([1.0, "NaN"], number=True)
        ('NaN(0x7fc00001)', '[1.0, NaN]')
        >>> shown_value(1627389952, number=True, julia_type="Char")
        "'a'"
        >>> shown_value(2, number=True, julia_type="Main.Color", size=4)
        '0x00000002'
    """
    if encoded is None:
        return "none"
    bits = bits_shown(encoded, julia_type, size)
    if bits is not None:
        return bits
    if number and isinstance(encoded, list):
        text = "[" + ", ".join(shown_value(x, number=True) for x in encoded) + "]"
    elif number and isinstance(encoded, str):
        text = encoded
    else:
        text = format_value(encoded)
    if len(text) <= _SHOWN_CHARS:
        return text
    size_text = f" ({len(encoded)} chars)" if isinstance(encoded, str) else ""
    return f"{text[: _SHOWN_CHARS - 1]}…{size_text}"


def bits_shown(value: Any, julia_type: str | None, size: int | None = None) -> str | None:
    """A value of a Julia bits type with no numpy dtype as ``inspect`` shows it
    (:meth:`treexchange.JuliaBits.shown`: a ``Char`` as ``'a'``, any other as its bits in hex):
    ``value`` a ``JuliaBits``, or the integer its bytes make as a schema records it (signed, as
    ``inspect --json`` writes it) of the type ``julia_type`` and ``size`` bytes (a ``Char``'s are
    4); None for anything else, and for such an integer whose size is not known (a schema
    document records the integer, not the width that its hex digits show).

    Example:
        >>> bits_shown(0x61000000, "Core.Char"), bits_shown(-1, "Main.Color", 2), bits_shown(7, "Main.Color")
        ("'a'", '0xffff', None)
        >>> from treexchange import JuliaBits
        >>> bits_shown(JuliaBits("Main.P16", b"\\x00\\x3c"), None), bits_shown(2.5, "Core.Float64", 8)
        ('0x3c00', None)
    """
    if isinstance(value, JuliaBits):
        return value.shown()
    if julia_type is None or type(value) is not int:
        return None
    if _short(julia_type) == "Char":
        size = 4
    if size is None or size <= 0:
        return None
    width = 8 * size
    if not -(1 << (width - 1)) <= value < 1 << width:
        return None
    return JuliaBits(julia_type, (value % (1 << width)).to_bytes(size, "little")).shown()
