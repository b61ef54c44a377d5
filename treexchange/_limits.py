"""Safety limits for reading untrusted files (in the spirit of msgpack's ``max_buffer_size``).

A lying header must never drive a huge allocation, a deep recursion or an endless walk: every
reader checks sizes against the file size and against these limits before it allocates.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Upper bounds the reader enforces; exceeding one raises :class:`treexchange.LimitError`.

    Args:
        max_depth: deepest nesting of values (NamedTuples in Tuples in ...) and of type parameters.
        max_objects: most object headers one file may make the reader visit.
        max_array_bytes: largest decoded (decompressed) array, in bytes. Uncompressed arrays are
            also bounded by the file size, always.
        max_elements: most elements in one array of references or structs (each is a Python object).
        max_header_messages: most messages in one object header, continuation chunks included.
        max_string_bytes: longest string, symbol or type name.

    Example:
        >>> from treexchange import Limits
        >>> Limits().max_depth
        512
        >>> Limits(max_array_bytes=1 << 20).max_array_bytes
        1048576
    """

    max_depth: int = 512
    max_objects: int = 10_000_000
    max_array_bytes: int = 1 << 40
    max_elements: int = 100_000_000
    max_header_messages: int = 100_000
    max_string_bytes: int = 1 << 30


DEFAULT_LIMITS = Limits()
