"""A ``BigInt``'s text as JLD2 stores it: ``string(x, base = 62)`` (JLD2's
``writeas(::Type{BigInt}) = String``, read back with ``parse(BigInt, s, base = 62)``).

Digits ``0-9``, ``A-Z``, ``a-z``; a negative number has a leading ``-``; zero is ``"0"``.
"""

from __future__ import annotations

DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_CHUNK = 10  # base-62 digits per division: Python divides a big int by 62**10 as cheaply as by 62
_CHUNK_BASE = 62**_CHUNK


def int_to_base62(n: int) -> str:
    """The text Julia's ``string(n, base = 62)`` gives.

    Example:
        >>> int_to_base62(-123), int_to_base62(0), int_to_base62(62**12)
        ('-1z', '0', '1000000000000')
    """
    n = int(n)
    sign, n = ("-", -n) if n < 0 else ("", n)
    chunks: list[str] = []
    while n >= _CHUNK_BASE:
        n, low = divmod(n, _CHUNK_BASE)
        chunks.append(_digits(low).rjust(_CHUNK, "0"))
    chunks.append(_digits(n))
    return sign + "".join(reversed(chunks))


def _digits(n: int) -> str:
    out: list[str] = []
    while n:
        n, d = divmod(n, 62)
        out.append(DIGITS[d])
    return "".join(reversed(out)) or "0"
