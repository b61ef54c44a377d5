"""Safety limits for reading untrusted files (in the spirit of msgpack's ``max_buffer_size``).

A lying header must never drive a huge allocation, a deep recursion or an endless walk: every
reader checks sizes against the file size and against these limits before it allocates. Bounds
whose right value depends on the file (how many nodes a listing may have, how many bytes
decompression may produce) default to ``None``, which means "derived from the file size"
(:meth:`Limits.nodes_for` and :meth:`Limits.decoded_for`), as msgpack derives its limits from
the buffer size.

``DEFAULT_LIMITS.max_depth`` is the one depth bound of both directions: :func:`treexchange.save`
refuses deeper trees, and the reader follows references that deep (the stack is made room for
by :func:`treexchange._recursion.stack_for_depth`, so Python's recursion limit is never hit first).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Upper bounds the reader enforces; exceeding one raises :class:`treexchange.LimitError`.

    Args:
        max_depth: deepest nesting of values (NamedTuples in Tuples in ...) and of type
            parameters; also the deepest tree :func:`treexchange.save` writes.
        max_objects: most object headers one file may make the reader visit.
        max_nodes: most nodes one listing or schema walk (``inspect``, ``infer_schema``,
            ``validate``) visits; ``None``: ``max(10**6, 64 * file size)``.
        max_array_bytes: largest array, in bytes (uncompressed arrays are also bounded by the
            file size, always).
        max_decoded_bytes: most bytes one open file may produce that it does not store: the
            output of decompression and fill values of unstored chunks, per array and in total
            (each dataset counted once); ``None``: ``max(256 MiB, 100 * file size)``.
        max_elements: most elements in one array of references or structs (each is a Python object).
        max_header_messages: most messages in one object header, continuation chunks included.
        max_string_bytes: longest string or symbol value.
        max_name_bytes: longest link name, field name or type name.
        max_type_chars: longest printed Julia type; ``str()`` cuts longer text (``…``) and
            writing such a type name raises.
        max_schema_depth: deepest tree a schema document describes (``infer_schema``).

    Example:
        >>> from treexchange import Limits
        >>> Limits().max_depth
        512
        >>> Limits(max_array_bytes=1 << 20).max_array_bytes
        1048576
        >>> Limits().decoded_for(1000) == 256 << 20, Limits().nodes_for(10**5)
        (True, 6400000)
    """

    max_depth: int = 512
    max_objects: int = 10_000_000
    max_nodes: int | None = None
    max_array_bytes: int = 1 << 40
    max_decoded_bytes: int | None = None
    max_elements: int = 100_000_000
    max_header_messages: int = 100_000
    max_string_bytes: int = 1 << 30
    max_name_bytes: int = 1 << 16
    max_type_chars: int = 1 << 20
    max_schema_depth: int = 64

    def nodes_for(self, file_size: int) -> int:
        """``max_nodes`` for a file of ``file_size`` bytes."""
        if self.max_nodes is not None:
            return self.max_nodes
        return max(10**6, 64 * file_size)

    def decoded_for(self, file_size: int) -> int:
        """``max_decoded_bytes`` for a file of ``file_size`` bytes."""
        if self.max_decoded_bytes is not None:
            return self.max_decoded_bytes
        return max(256 << 20, 100 * file_size)


DEFAULT_LIMITS = Limits()


def type_depth(limits: Limits) -> int:
    """How deep type parameters may nest: ``2 * max_depth + 16``. A value ``max_depth`` levels
    deep has a type about twice as deep (each NamedTuple level is ``NamedTuple{names, Tuple{...}}``).

    Example:
        >>> type_depth(Limits())
        1040
    """
    return 2 * limits.max_depth + 16


def reference_depth(limits: Limits) -> int:
    """How deep the reader follows references: ``3 * max_depth``. A value ``max_depth`` levels
    deep may be three times as many datasets deep (a Julia ``Dict`` is the Dict, its
    serialized form and its vector of pairs).

    Example:
        >>> reference_depth(Limits())
        1536
    """
    return 3 * limits.max_depth
