"""Dict keys as Julia tells them apart: a Julia ``Dict`` compares keys with ``isequal``, where
every NaN is the same key (and ``-0.0`` is not ``0.0``). Python's ``dict`` keeps two NaN objects
as two keys, so a dict may hold entries that no Julia ``Dict`` can: the writer refuses those."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from .._errors import PathSegment, WriteError

_NAN = ("NaN",)
"""Every NaN's form: one key for Julia, whatever its sign and payload bits."""


def check_julia_keys(keys: Iterable[Any], path: tuple[PathSegment, ...]) -> None:
    """Raise :class:`WriteError` when two of ``keys`` are one key in Julia (two NaNs, or tuples
    equal but for the NaNs in them). Keys without a NaN are distinct under ``isequal`` exactly
    when Python's dict kept them apart, so only the keys holding a NaN are compared.

    Example:
        >>> check_julia_keys([1.0, float("nan"), "a"], ("d",))
        >>> try:
        ...     check_julia_keys([float("nan"), float("nan")], ("d",))
        ... except WriteError as err:
        ...     print(err.message[:33])
        Dict keys nan and nan are one key
    """
    seen: dict[Any, Any] = {}
    for key in keys:
        form = _nan_form(key)
        if form is None:
            continue
        if form in seen:
            raise WriteError(
                f"Dict keys {seen[form]!r} and {key!r} are one key in Julia (isequal treats every NaN "
                "as the same key): no Julia Dict holds both",
                path=path,
            )
        seen[form] = key


def _nan_form(key: Any) -> Any:
    """``key`` as ``isequal`` sees it when it holds a NaN, else ``None``."""
    if isinstance(key, (float, np.floating)):
        return _NAN if key != key else None
    if isinstance(key, (complex, np.complexfloating)):
        return (_part(key.real), _part(key.imag)) if key != key else None
    if isinstance(key, tuple):
        forms = [_nan_form(x) for x in key]
        if all(f is None for f in forms):
            return None
        return tuple(_exact(x) if f is None else f for x, f in zip(key, forms))
    return None


def _part(x: Any) -> Any:
    return _NAN if x != x else _exact(x)


def _exact(x: Any) -> Any:
    """A key part that holds no NaN, told apart as ``isequal`` does (``-0.0`` is not ``0.0``)."""
    if isinstance(x, (float, np.floating)):
        return (float(x), math.copysign(1.0, float(x)))
    return x
