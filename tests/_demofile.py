"""A tiny JLD2 file built in memory, for tests (it is not part of the package).

It holds ``a = zeros(2)`` like ``jldsave("demo.jld2"; a = zeros(2))``, written by treexchange's
own JLD2 writer: the same bytes JLD2.jl writes for it (the fixture
``jld2jl/docs_v0.6.0_demo.jld2`` is this file), except for the producer note in the header.
"""

from __future__ import annotations

import io

PRODUCER = " (treexchange demo)"
"""The note after JLD2's format string in the demo file's header."""


def demo_jld2_bytes(**arrays: object) -> bytes:
    """The bytes of a small JLD2 file holding ``arrays`` (default ``a = zeros(2)``).

    Each value goes through ``numpy.asarray`` and is written in Julia's shape (column-major on
    disk), as JLD2 does.

    """
    import numpy as np

    from treexchange._jld2._writer import JLD2Writer

    if not arrays:
        arrays = {"a": np.zeros(2)}
    buffer = io.BytesIO()
    writer = JLD2Writer(buffer, producer=PRODUCER)
    for name, value in arrays.items():
        writer.write(name, np.asarray(value))
    writer.close()
    return buffer.getvalue()
