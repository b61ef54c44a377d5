"""Safety limits for reading untrusted input (in the spirit of msgpack's ``max_buffer_size``).

A lying header must never drive a huge allocation, a deep recursion or an endless walk: every
reader checks sizes against the file size and against these limits before it allocates. Bounds
whose right value depends on the file (how many nodes a listing may have, how many bytes
decompression may produce) default to ``None``, which means "derived from the file size"
(:meth:`Limits.nodes_for`, :meth:`Limits.decoded_for`, :meth:`Limits.virtual_elements_for`), as
msgpack derives its limits from the buffer size.

Every safety bound of the package lives here, as a field or as a function of the fields
(:func:`type_depth`, :func:`reference_depth`, :func:`datatype_depth`, :func:`path_depth`), and is
passed to the code that enforces it: the file reader gets the ``Limits`` given to ``open`` /
``load``; the writer, the schema layer (documents, embedded schemas, alignment in ``diff``) and
Julia type text get theirs from their caller, :data:`DEFAULT_LIMITS` at the public entry points
that take none. Printing a type (``str(t)``, ``max_type_chars``) has no caller to ask and uses
:data:`DEFAULT_LIMITS`.

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
            ``validate``) visits, and most nodes the immutable values a file places again (a
            tuple a BSON backref names twice) add at the places that hold them
            (``treexchange._expansion``); ``None``: ``max(10**6, 64 * file size)``.
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
        max_schema_depth: deepest tree a schema document describes (``infer_schema``,
            ``validate``, ``load_schema``).
        max_virtual_elements: most elements that take no bytes in the file (zero-size elements of
            an array or a vlen sequence, ``NTuple{N}`` of ghosts), whose counts come from header
            numbers alone; also capped by ``max_elements``. ``None``: ``max(65536, 16 * file size)``.
        max_bigint_digits: longest ``BigInt`` read, in the base-62 digits JLD2 stores (2399: every
            such value fits Python's int-to-text limit of 4300 decimal digits, so ``inspect`` and
            schemas can print it).
        max_type_text_depth: deepest nesting of type parameters in Julia type *text*
            (``JuliaType.parse``: schema documents, types written by hand).
        max_schema_bytes: largest schema document read from a file (``load_schema``).
        max_embedded_schema_chars: longest schema embedded in a file's root attribute.
        max_align_cells: most (expected, actual) item pairs ``diff`` aligns by longest common
            subsequence (a quadratic table); longer sequences are paired by position.

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
    max_virtual_elements: int | None = None
    max_bigint_digits: int = 2399
    max_type_text_depth: int = 64
    max_schema_bytes: int = 256 << 20
    max_embedded_schema_chars: int = 64 << 20
    max_align_cells: int = 250_000

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

    def virtual_elements_for(self, file_size: int) -> int:
        """``max_virtual_elements`` for a file of ``file_size`` bytes (never above ``max_elements``).

        Example:
            >>> from treexchange import Limits
            >>> Limits().virtual_elements_for(1000), Limits().virtual_elements_for(10**6)
            (65536, 16000000)
        """
        cap = self.max_virtual_elements
        if cap is None:
            cap = max(1 << 16, 16 * file_size)
        return min(cap, self.max_elements)


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


def datatype_depth(limits: Limits) -> int:
    """How deep HDF5 datatypes may nest: ``max_depth + 16``. A value ``max_depth`` levels deep
    stored inline (NamedTuples in NamedTuples of bits fields) has one compound per level plus a
    few for its leaf (arrays of vlen strings ...). The reader parses that deep, and the writer
    refuses to write deeper.

    Example:
        >>> datatype_depth(Limits())
        528
    """
    return limits.max_depth + 16


def path_depth(limits: Limits) -> int:
    """How many segments a lazy node's tree path may have: ``4 * max_depth + 16`` (a Dict level is
    three segments, ``kvvec[i].second``, below the Dict's own).

    Example:
        >>> path_depth(Limits())
        2064
    """
    return 4 * limits.max_depth + 16
