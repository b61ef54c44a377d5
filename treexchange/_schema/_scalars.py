"""Scalar values in schema documents: their JSON encoding and how constraints compare to them.

The encoding is ``inspect --json``'s ``value``, by the same function
(:func:`treexchange._jsonform.json_scalar`): numbers as JSON numbers, complex as ``[re, im]``,
integers wider than 64 bits (and every ``Int128``, ``UInt128``, ``BigInt``) as decimal strings,
and the non-finite floats as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (JSON has
no literal for them; ``"Inf"`` and ``"-Inf"`` are accepted too, and so are bare JSON integers of
any size, which earlier documents may hold).

Comparisons happen at the *value's* precision: a schema ``enum: [0.1]`` matches a ``Float32``
``0.1f0`` because ``0.1`` is first rounded to float32, exactly as Julia's ``0.1f0 == Float32(0.1)``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .._values import JuliaBits

_NONFINITE = {
    "NaN": math.nan,
    "Infinity": math.inf,
    "-Infinity": -math.inf,
    "+Infinity": math.inf,
    "Inf": math.inf,
    "-Inf": -math.inf,
    "+Inf": math.inf,
}


def _as_number(encoded: Any) -> Any:
    """A JSON-encoded number back to Python (``"NaN"`` → nan, ``"12"`` → 12, ``[1, 2]`` → 1+2j)."""
    if isinstance(encoded, list):
        return complex(_as_number(encoded[0]), _as_number(encoded[1]))
    if isinstance(encoded, str):
        if encoded in _NONFINITE:
            return _NONFINITE[encoded]
        try:
            return int(encoded)
        except ValueError:
            return float(encoded)
    return encoded


def _at_precision(number: Any, like: Any) -> Any:
    """``number`` rounded to the precision of the scalar ``like`` (a numpy scalar), when possible."""
    if isinstance(like, np.generic) and not isinstance(like, np.bool_):
        try:
            with np.errstate(all="ignore"):
                return np.array(number, dtype=like.dtype)[()]
        except (TypeError, ValueError, OverflowError):
            return number
    return number


def _same_number(a: Any, b: Any) -> bool:
    try:
        if isinstance(a, (complex, np.complexfloating)) or isinstance(b, (complex, np.complexfloating)):
            ca, cb = complex(a), complex(b)
            return _same_number(ca.real, cb.real) and _same_number(ca.imag, cb.imag)
        fa, fb = a, b
        if isinstance(fa, np.generic):
            fa = fa.item() if fa.dtype.kind in "iub" else float(fa)
        if isinstance(fb, np.generic):
            fb = fb.item() if fb.dtype.kind in "iub" else float(fb)
        if isinstance(fa, float) and isinstance(fb, float) and math.isnan(fa) and math.isnan(fb):
            return True
        return bool(fa == fb)
    except (TypeError, ValueError, OverflowError):
        return False


def number_in(value: Any, allowed: list[Any]) -> bool:
    """Whether a number equals one of the JSON-encoded ``allowed`` values (at its own precision).

    Example:
        >>> number_in(np.float32(0.1), [0.1, 0.2]), number_in(np.float64(0.1), [0.10000000149011612])
        (True, False)
        >>> from treexchange import Int128
        >>> number_in(float("nan"), ["NaN"]), number_in(Int128(2**100), [str(2**100)])
        (True, True)
    """
    if isinstance(value, JuliaBits):
        value = value.as_int()
    for entry in allowed:
        if _same_number(value, _at_precision(_as_number(entry), value)):
            return True
    return False


def number_compare(value: Any, bound: int | float) -> int | None:
    """-1, 0 or 1 as ``value`` is below, at or above ``bound`` (bound at the value's precision);
    ``None`` when they cannot be ordered (NaN, complex).

    Example:
        >>> number_compare(np.float32(0.1), 0.1), number_compare(3, 2), number_compare(float("nan"), 0)
        (0, 1, None)
    """
    if isinstance(value, JuliaBits):
        value = value.as_int()
    if isinstance(value, (complex, np.complexfloating)):
        return None
    b = _at_precision(bound, value)
    try:
        if isinstance(value, float) and math.isnan(value):
            return None
        if isinstance(value, np.generic) and value.dtype.kind not in "iub" and math.isnan(float(value)):
            return None
        if value < b:
            return -1
        if value > b:
            return 1
        return 0
    except (TypeError, ValueError):
        return None


def format_value(encoded: Any) -> str:
    """Compact text of a JSON-encoded value for messages.

    Example:
        >>> format_value([1.0, 2.0]), format_value("relu"), format_value(True)
        ('[1.0, 2.0]', "'relu'", 'true')
    """
    if isinstance(encoded, bool):
        return "true" if encoded else "false"
    if isinstance(encoded, str):
        return repr(encoded)
    return str(encoded)
