"""Whether a dtype conversion keeps every value: the check behind ``restore(..., cast=...)``.

Conversions are judged on the *values*, not on the dtypes: ``int64 -> int32`` is fine for an
array of small counters and loses data for ``2**40``. The arrays are read in bounded chunks, so
checking a memory-mapped array never holds more than one chunk's converted copy.

Modes (``cast=`` in :func:`treexchange.restore`):

* ``"none"``: no conversion at all (dtypes must already agree);
* ``"exact"`` (``cast=True``): convert only if every value converts back to itself; a NaN must
  come back with the same bits (its sign and payload: float64 -> float32 keeps a quiet NaN whose
  payload fits, and changes any other);
* ``"round"``: floats may round to the nearest value of the target dtype (a NaN's payload may
  lose its low bits like any mantissa); still refused are a
  finite value becoming ``inf`` (overflow), a non-zero value becoming ``0`` (underflow), a
  non-zero imaginary part dropped, and integers out of range or floats that are not integers
  going into an integer dtype;
* ``"unsafe"``: numpy's ``astype``, whatever it does to the values (the caller asked for it).
"""

from __future__ import annotations

import warnings
from typing import Literal

import numpy as np

CastMode = Literal["none", "exact", "round", "unsafe"]

CAST_CHOICES = (False, True, "exact", "round", "unsafe")

_CHUNK = 1 << 20  # elements per checked chunk: bounds the temporary copies to a few MiB


def cast_mode(cast: object) -> CastMode:
    """The mode for a ``cast=`` argument.

    Example:
        >>> cast_mode(True), cast_mode(False), cast_mode("round")
        ('exact', 'none', 'round')
    """
    if cast is False or cast is None:
        return "none"
    if cast is True or cast == "exact":
        return "exact"
    if cast == "round":
        return "round"
    if cast == "unsafe":
        return "unsafe"
    raise ValueError(f"cast must be False, True, 'exact', 'round' or 'unsafe', not {cast!r}")


class Loss:
    """Values that would change: how many, out of how many, and the first one (as text)."""

    __slots__ = ("changed", "example", "reason", "total")

    def __init__(self, changed: int, total: int, example: str, reason: str) -> None:
        self.changed = changed
        self.total = total
        self.example = example
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.changed} of {self.total} values would change ({self.reason}, e.g. {self.example})"


def conversion_loss(array: np.ndarray, dst: np.dtype, mode: CastMode) -> Loss | None:
    """``None`` when converting ``array`` to ``dst`` keeps every value under ``mode``, else a Loss.

    Example:
        >>> big = np.array([1, 2**40], np.int64)
        >>> str(conversion_loss(big, np.dtype(np.int32), "exact"))
        '1 of 2 values would change (out of range, e.g. 1099511627776 -> 0)'
        >>> conversion_loss(np.array([0.5, 2.0]), np.dtype(np.float32), "exact") is None
        True
        >>> str(conversion_loss(np.array([0.1, 1e300, 1e-310]), np.dtype(np.float32), "round"))
        '2 of 3 values would change (overflow, e.g. 1e+300 -> inf)'
        >>> payload = np.array([0x7FF8000000000000, 0x7FF8000000000001], np.uint64).view(np.float64)
        >>> loss = conversion_loss(payload, np.dtype(np.float32), "exact")
        >>> loss.changed, loss.reason, loss.example
        (1, 'NaN payload or sign bits lost', 'NaN 0x7ff8000000000001 -> NaN 0x7fc00000')
    """
    src = array.dtype
    dst = np.dtype(dst)
    if mode == "unsafe" or src == dst:
        return None
    flat = np.ravel(array, order="K")  # a view for the (F- or C-) contiguous arrays files give
    changed, first = 0, None
    for start in range(0, flat.size, _CHUNK):
        part = np.asarray(flat[start : start + _CHUNK])
        converted = _astype(part, dst)
        bad = _changed(part, converted, mode)
        n = int(np.count_nonzero(bad))
        if n and first is None:
            i = int(np.argmax(bad))
            first = (part[i], converted[i])
        changed += n
    if first is None:
        return None
    before, after = first
    example = f"{_text(before)} -> {_text(after)}"
    return Loss(changed, int(flat.size), example, _reason(before, after))


def scalar_loss(value: object, dst: np.dtype, mode: CastMode) -> Loss | None:
    """:func:`conversion_loss` for one number."""
    return conversion_loss(np.asarray(value).reshape(1), dst, mode)


def convert(array: np.ndarray, dst: np.dtype) -> np.ndarray:
    """``array.astype(dst)`` without numpy's cast warnings (the values were checked, or the caller
    asked for ``cast="unsafe"``)."""
    return _astype(array, np.dtype(dst))


def _astype(part: np.ndarray, dst: np.dtype) -> np.ndarray:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # ComplexWarning, "invalid value encountered in cast"
        return part.astype(dst)


def _changed(src: np.ndarray, dst: np.ndarray, mode: CastMode) -> np.ndarray:
    """A boolean mask of the values that the conversion changes (more than ``mode`` allows).

    Round trips (``dst -> src`` again) are not enough on their own: out-of-range float <-> integer
    conversions are undefined in C (x86 gives INT_MIN, ARM saturates), so a saturated value can
    come back equal. Those directions are checked against exact power-of-two bounds first.
    """
    s, d = src.dtype, dst.dtype
    if _is_int(s) and _is_int(d) and d.kind != "b":
        return _out_of_range(src, d)
    with np.errstate(all="ignore"):
        if d.kind in "iu":  # float/complex -> integer: whole numbers in range only, in every mode
            return _not_whole_in_range(src, d)
        if mode == "round" and _is_float(d):
            bad = np.isfinite(src) & ~np.isfinite(dst)  # overflow
            bad |= (src != 0) & (dst == 0)  # underflow
            if s.kind == "c" and d.kind != "c":
                bad |= src.imag != 0
            return bad
        if s.kind in "iu":  # integer -> float/complex: the float must be that very integer
            held = dst.real if d.kind == "c" else dst
            bad = ~np.isfinite(held) | _outside(held, s)
            return bad | (_astype(dst, s) != src)
        back = _astype(dst, s)
        same = back == src
        if _is_float(s):
            # A NaN is kept only with its sign and payload bits (float64 -> float32 drops the low
            # payload bits and quiets a signalling NaN): the round trip must give the same bits.
            nan = np.isnan(src)
            if nan.any():
                same[nan] = _same_bits(src[nan], back[nan])
        return ~same


def _same_bits(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise: whether ``a`` and ``b`` (one dtype) hold the same bit pattern."""
    n = a.dtype.itemsize
    raw_a = np.ascontiguousarray(a).view(np.uint8).reshape(-1, n)
    raw_b = np.ascontiguousarray(b).view(np.uint8).reshape(-1, n)
    return (raw_a == raw_b).all(axis=1).reshape(a.shape)


def _not_whole_in_range(src: np.ndarray, d: np.dtype) -> np.ndarray:
    if src.dtype.name == "bfloat16":
        src = src.astype(np.float32)  # exact; numpy's ufuncs all know float32
    x = src.real if src.dtype.kind == "c" else src
    bad = ~np.isfinite(x) | _outside(x, d) | (np.trunc(x) != x)
    if src.dtype.kind == "c":
        bad |= src.imag != 0
    return bad


def _outside(x: np.ndarray, d: np.dtype) -> np.ndarray:
    """Floats outside integer dtype ``d``'s range, compared with exact powers of two."""
    bits = d.itemsize * 8
    if d.kind == "u":
        return (x < 0) | (x >= 2.0**bits)
    return (x < -(2.0 ** (bits - 1))) | (x >= 2.0 ** (bits - 1))


def _reason(before: np.generic, after: np.generic) -> str:
    """Why one value changed, in words."""
    if after.dtype.kind == "b":
        return "not 0 or 1"
    if _is_int(after.dtype):
        return "out of range" if _is_int(before.dtype) else "not an integer or out of range"
    with np.errstate(all="ignore"):
        if np.isnan(before):
            return "NaN payload or sign bits lost"
        if before.dtype.kind == "c" and after.dtype.kind != "c" and before.imag != 0:
            return "imaginary part dropped"
        if np.isfinite(before) and not np.isfinite(after):
            return "overflow"
        if before != 0 and after == 0:
            return "underflow"
    return "rounding"


def _out_of_range(src: np.ndarray, d: np.dtype) -> np.ndarray:
    bad = np.zeros(src.shape, bool)
    if src.dtype.kind == "b":
        return bad
    lo, hi = int(np.iinfo(d).min), int(np.iinfo(d).max)
    info = np.iinfo(src.dtype)
    # Compare only against bounds the source dtype can hold (numpy refuses out-of-range scalars).
    if int(info.min) < lo:
        bad |= src < src.dtype.type(lo)
    if int(info.max) > hi:
        bad |= src > src.dtype.type(hi)
    return bad


def _is_int(d: np.dtype) -> bool:
    return d.kind in "biu"


def _is_float(d: np.dtype) -> bool:
    return d.kind in "fc" or d.name == "bfloat16"


def _text(x: object) -> str:
    if isinstance(x, np.generic) and x.dtype.kind == "f" and x.dtype.itemsize in (2, 4, 8) and x != x:
        bits = int(np.asarray(x).view(f"u{x.dtype.itemsize}"))
        return f"NaN 0x{bits:0{2 * x.dtype.itemsize}x}"  # which NaN: its bits
    return repr(x.item() if isinstance(x, np.generic) else x)
