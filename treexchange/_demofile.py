"""A tiny JLD2-style file built in memory, for docstring examples and smoke tests.

It holds ``a = zeros(2)`` like ``jldsave("demo.jld2"; a = zeros(2))``: a 512-byte user block
with the JLD2 0.2.0 header, then HDF5 written by h5py (superblock v3, one float64 dataset).
Not byte-identical to what JLD2 writes; a JLD2 reader accepts it.
"""

from __future__ import annotations

import io

HEADER = b"HDF5-based Julia Data Format, version 0.2.0\x00 (treexchange demo)\x00"


def demo_jld2_bytes(**arrays: object) -> bytes:
    """The bytes of a small JLD2 file holding ``arrays`` (default ``a = zeros(2)``).

    Arrays are stored in Julia's column-major order (dims reversed for HDF5), as JLD2 does.

    Example:
        >>> demo_jld2_bytes()[:29]
        b'HDF5-based Julia Data Format,'
    """
    import h5py
    import numpy as np

    if not arrays:
        arrays = {"a": np.zeros(2)}
    bio = io.BytesIO()
    with h5py.File(bio, "w", userblock_size=512, libver="latest") as f:
        for name, value in arrays.items():
            arr = np.asarray(value)
            f.create_dataset(name, data=arr.T)  # Julia dims reversed, same bytes in F order
    raw = bytearray(bio.getvalue())
    raw[: len(HEADER)] = HEADER
    return bytes(raw)
