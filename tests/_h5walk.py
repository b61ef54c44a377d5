"""h5py as an independent oracle: every dataset of a file reachable from the root through links
and object references (JLD2's unnamed datasets are only reachable through references)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np

# JLD2 writes Complex{T} as a compound of two fields named re and im (h5py's default names are r
# and i): told so, h5py reads them as numpy complex numbers, and the oracle compares them too.
h5py.get_config().complex_names = ("re", "im")


def _refs_in(value: np.ndarray | np.void, dtype: np.dtype) -> Iterator[h5py.Reference]:
    if h5py.check_ref_dtype(dtype) is not None:
        for r in np.asarray(value).ravel():
            if r:
                yield r
        return
    if dtype.fields is not None:
        for name in dtype.names:
            sub = dtype.fields[name][0]
            yield from _refs_in(np.asarray(value)[name], sub)


def _ref_only_dtype(tid: h5py.h5t.TypeID) -> np.dtype | None:
    """A numpy dtype keeping only the object references of an HDF5 type (nested compounds too),
    so datasets h5py cannot convert as a whole (JLD2 DataType members) still give their refs."""
    cls = tid.get_class()
    if cls == h5py.h5t.REFERENCE:
        return np.dtype(h5py.ref_dtype)
    if cls == h5py.h5t.COMPOUND:
        fields = []
        for i in range(tid.get_nmembers()):
            sub = _ref_only_dtype(tid.get_member_type(i))
            if sub is not None:
                fields.append((tid.get_member_name(i).decode(), sub))
        return np.dtype(fields) if fields else None
    return None


def _dataset_refs(ds: h5py.Dataset) -> list[h5py.Reference]:
    dt = _ref_only_dtype(ds.id.get_type())
    if dt is None:
        return []
    arr = np.empty(ds.shape, dtype=dt)
    ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, arr, h5py.h5t.py_create(dt))
    return list(_refs_in(arr, dt))


def reachable_datasets(path: Path) -> dict[int, h5py.Dataset]:
    """Relative address -> dataset, for every dataset h5py can open (``/_types`` excluded)."""
    f = h5py.File(path, "r")
    seen: dict[int, h5py.Dataset] = {}
    todo: list[object] = []
    for name in f:
        if name == "_types":
            continue
        try:
            todo.append(f[name])
        except Exception:
            continue
    while todo:
        obj = todo.pop()
        if isinstance(obj, h5py.Group):
            for k in obj:
                try:
                    todo.append(obj[k])
                except Exception:
                    pass
            continue
        if not isinstance(obj, h5py.Dataset):
            continue
        addr = h5py.h5o.get_info(obj.id).addr
        if addr in seen:
            continue
        seen[addr] = obj
        try:
            if obj.shape is None:
                continue
            refs = _dataset_refs(obj)
        except Exception:
            continue
        for r in refs:
            try:
                todo.append(f[r])
            except Exception:
                pass
    return seen


def is_numeric(ds: h5py.Dataset) -> bool:
    try:
        dt = ds.dtype
    except Exception:
        return False
    return (
        ds.shape is not None and dt.fields is None and dt.kind in "biufc" and h5py.check_ref_dtype(dt) is None
    )


def julia_shape(ds: h5py.Dataset) -> tuple[int, ...]:
    if "dimensions" in ds.attrs:
        return tuple(int(x) for x in np.asarray(ds.attrs["dimensions"])[::-1])
    return tuple(reversed(ds.shape))


def sha256_le(arr: np.ndarray) -> str:
    """SHA-256 of an h5py (C-ordered, HDF5 dims) array = Julia column-major bytes, little-endian."""
    a = np.ascontiguousarray(arr)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return hashlib.sha256(a.tobytes()).hexdigest()
