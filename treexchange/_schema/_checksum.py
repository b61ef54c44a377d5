"""The per-array integrity digest: sha256 of the elements in Julia (column-major) order, little-endian.

These are exactly the bytes JLD2 stores for an uncompressed array, so the digest of a file's array
equals the digest of the same array held in Python in Julia's shape (an F-ordered numpy array).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

# Hash big arrays that are not already column-major in slabs of about this many bytes, so the
# temporary copy stays small.
_SLAB_BYTES = 16 << 20


def array_sha256(array: Any) -> str:
    """Hex sha256 of ``array``'s elements in column-major order, little-endian.

    Example:
        >>> a = np.arange(6, dtype="<i4").reshape(2, 3)  # Julia [0 2 4; 1 3 5]
        >>> array_sha256(a) == hashlib.sha256(a.tobytes(order="F")).hexdigest()
        True
        >>> array_sha256(np.asfortranarray(a)) == array_sha256(a.astype(">i4"))
        True
    """
    a = np.asarray(array)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and np.little_endian is False):
        a = a.astype(a.dtype.newbyteorder("<"))
    h = hashlib.sha256()
    if a.size == 0:
        return h.hexdigest()
    if a.ndim <= 1 or a.flags.f_contiguous:
        # The transpose of a column-major array is row-major contiguous: hash it without a copy.
        h.update(np.ascontiguousarray(a.T).reshape(-1).view(np.uint8).data)
        return h.hexdigest()
    # Column-major order = the last Julia axis varies slowest: hash one block of it at a time.
    per_slice = max(1, a[..., 0].nbytes)
    step = max(1, _SLAB_BYTES // per_slice)
    for start in range(0, a.shape[-1], step):
        block = np.asfortranarray(a[..., start : start + step])
        h.update(np.ascontiguousarray(block.T).reshape(-1).view(np.uint8).data)
    return h.hexdigest()
