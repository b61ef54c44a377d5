"""Plain HDF5 files (no JLD2 header), read through h5py into treexchange's value model.

Only used when the caller opts in (``treexchange.open(path, allow_hdf5=True)`` or
``load(..., allow_hdf5=True)``). Mapping, as JLD2.jl itself reads such files:

* groups -> mappings (``read()`` gives nested ``dict``);
* numeric / bool datasets -> numpy arrays in Julia order: HDF5 dims reversed, F-ordered view of
  the same bytes (``order="storage"`` keeps h5py's C-ordered shape); scalars -> numpy scalars;
* strings -> ``str``; compounds -> :class:`treexchange.NamedTuple` of their members;
* object references -> the referenced value; empty (null) datasets -> ``None``.

Arrays are copies (h5py reads into memory), not memory maps.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

import numpy as np

from ._errors import FormatError, UnsupportedError, WrongFormatError
from ._juliatype import JuliaType
from ._values import JuliaArray, NamedTuple

_NAMES = {
    "i1": "Int8", "i2": "Int16", "i4": "Int32", "i8": "Int64",
    "u1": "UInt8", "u2": "UInt16", "u4": "UInt32", "u8": "UInt64",
    "f2": "Float16", "f4": "Float32", "f8": "Float64",
    "c8": "Complex{Float32}", "c16": "Complex{Float64}", "b1": "Bool",
}  # fmt: skip


def _eltype(dtype: np.dtype) -> JuliaType:
    key = f"{dtype.kind}{dtype.itemsize}"
    name = _NAMES.get(key)
    if name is None:
        return JuliaType("Core.String") if dtype.kind in "SUO" else JuliaType("Core.Any")
    if name.startswith("Complex"):
        return JuliaType("Base.Complex", (JuliaType("Core." + name[8:-1]),))
    return JuliaType("Core." + name)


def _convert(h5: Any, value: Any, dtype: np.dtype, order: str) -> Any:
    import h5py

    if isinstance(value, np.ndarray) and value.dtype.fields is None and value.dtype.kind in "biufc":
        if value.ndim == 0:
            return value[()]
        return value.T if order == "julia" else value
    if dtype.fields is not None:
        if isinstance(value, np.ndarray) and value.ndim > 0:
            flat = [_convert(h5, v, dtype, order) for v in value.T.ravel(order="F")]
            data = np.empty(len(flat), dtype=object)
            data[:] = flat
            shape = value.shape[::-1] if order == "julia" else value.shape
            return JuliaArray("Core.NamedTuple", data.reshape(shape, order="F" if order == "julia" else "C"))
        rec = value[()] if isinstance(value, np.ndarray) else value
        assert dtype.names is not None
        return NamedTuple(
            (name, _convert(h5, rec[name], dtype.fields[name][0], order)) for name in dtype.names
        )
    if h5py.check_string_dtype(dtype) is not None or dtype.kind == "S":
        if isinstance(value, np.ndarray):
            items = [_text(v) for v in value.T.ravel(order="F")]
            if value.ndim == 0:
                return items[0]
            return JuliaArray("Core.String", items)
        return _text(value)
    if h5py.check_ref_dtype(dtype) is not None:
        if isinstance(value, np.ndarray):
            items = [_deref(h5, r, order) for r in value.T.ravel(order="F")]
            return items[0] if value.ndim == 0 else items
        return _deref(h5, value, order)
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    if isinstance(value, (np.generic, int, float)):
        return value
    raise UnsupportedError(f"HDF5 datatype {dtype} is not supported for plain HDF5 files")


def _text(v: Any) -> str:
    return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)


def _deref(h5: Any, ref: Any, order: str) -> Any:
    if not ref:
        return None
    return _read_object(h5, h5[ref], order)


def _read_object(h5: Any, obj: Any, order: str) -> Any:
    import h5py

    if isinstance(obj, h5py.Group):
        return {k: _read_object(h5, obj[k], order) for k in obj}
    if obj.shape is None:
        return None
    return _convert(h5, obj[()], obj.dtype, order)


class ValueNode:
    """A node over an already-read value (compound scalars, string vectors of plain HDF5 files):
    kind, Julia type and children come from the value itself."""

    def __init__(self, value: Any, path: tuple[str | int, ...]) -> None:
        from ._typeof import julia_type_of, kind_of

        self._value = value
        self.path = path
        self.kind = kind_of(value, path=path)
        self.julia_type = julia_type_of(value, path=path)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self._value))

    @property
    def dtype(self) -> np.dtype:
        return np.asarray(self._value).dtype

    def read(self, *, order: str = "julia") -> Any:
        return self._value

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self._value)
        return arr.astype(dtype) if dtype is not None else arr

    def __len__(self) -> int:
        return sum(1 for _ in self.children())

    def children(self) -> Iterator[tuple[str | int, ValueNode]]:
        v = self._value
        if isinstance(v, (NamedTuple, dict)):
            for k, x in v.items():
                seg = k if isinstance(k, str) else str(k)
                yield seg, ValueNode(x, (*self.path, seg))
        elif isinstance(v, (tuple, list)):
            for i, x in enumerate(v):
                yield i + 1, ValueNode(x, (*self.path, i + 1))
        elif isinstance(v, JuliaArray):
            for i, x in enumerate(v.tolist()):
                yield i + 1, ValueNode(x, (*self.path, i + 1))


class PlainNode:
    """A dataset or group of a plain HDF5 file; arrays are read when asked."""

    def __init__(self, h5: Any, obj: Any, path: tuple[str, ...]) -> None:
        import h5py

        self._h5 = h5
        self._obj = obj
        self.path = path
        self._value_node: ValueNode | None = None
        if isinstance(obj, h5py.Group):
            self.kind = "group"
            self.julia_type = JuliaType("JLD2.Group")
            return
        dt = obj.dtype
        if obj.shape is not None and obj.ndim > 0 and dt.kind in "biufc" and dt.fields is None:
            self.kind = "array"
            self.julia_type = JuliaType("Core.Array", (_eltype(dt), np.int64(obj.ndim)))
            return
        # Anything else is small or structured: read it and describe the value.
        self._value_node = ValueNode(self.read(), path)
        self.kind = self._value_node.kind
        self.julia_type = self._value_node.julia_type

    @property
    def shape(self) -> tuple[int, ...]:
        """Julia's shape (HDF5 dims reversed)."""
        return tuple(reversed(self._obj.shape or ()))

    @property
    def dtype(self) -> np.dtype:
        return self._obj.dtype

    def read(self, *, order: str = "julia") -> Any:
        return _read_object(self._h5, self._obj, order)

    def __getitem__(self, index: Any) -> Any:
        if self.kind == "group":
            return PlainNode(self._h5, self._obj[index], (*self.path, index))
        if self.kind != "array":
            for seg, child in self.children():
                if seg == index:
                    return child
            raise KeyError(index)
        idx = index if isinstance(index, tuple) else (index,)
        # Julia-shape index -> HDF5 index (reversed), then transpose back.
        return np.asarray(self._obj[tuple(reversed(idx))]).T if idx else self.read()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        arr = np.asarray(self.read())
        return arr.astype(dtype) if dtype is not None else arr

    def __iter__(self) -> Iterator[str]:
        if self.kind != "group":
            raise TypeError("not a group")
        return iter(self._obj)

    def __len__(self) -> int:
        if self.kind == "group":
            return len(self._obj)
        if self._value_node is not None:
            return len(self._value_node)
        return self.shape[0] if self.shape else 0

    def children(self) -> Iterator[tuple[Any, Any]]:
        if self.kind == "group":
            for k in self._obj:
                yield k, PlainNode(self._h5, self._obj[k], (*self.path, k))
        elif self._value_node is not None:
            yield from self._value_node.children()

    def __repr__(self) -> str:
        return f"<PlainNode {'/'.join(self.path)}: {self.kind} {self.julia_type}>"


class PlainFile(Mapping[str, PlainNode]):
    """A plain HDF5 file opened with ``allow_hdf5=True`` (read through h5py)."""

    format_version = None
    producer = ""
    header = ""
    legacy_header = False
    kind = "group"
    path: tuple[str, ...] = ()

    def __init__(self, source: str | os.PathLike[str] | bytes) -> None:
        import h5py

        self.filename = "<bytes>" if isinstance(source, (bytes, bytearray)) else os.fspath(source)
        target: Any = io.BytesIO(bytes(source)) if isinstance(source, (bytes, bytearray)) else self.filename
        try:
            self._h5 = h5py.File(target, "r")
        except OSError as err:
            raise WrongFormatError(f"{self.filename!r} is not an HDF5 file h5py can open ({err})") from err
        self.closed = False

    def __getitem__(self, key: str) -> PlainNode:
        try:
            obj = self._h5[key]
        except (KeyError, ValueError) as err:
            raise KeyError(key) from err
        return PlainNode(self._h5, obj, tuple(key.strip("/").split("/")))

    def __iter__(self) -> Iterator[str]:
        return iter(self._h5)

    def __len__(self) -> int:
        return len(self._h5)

    def children(self) -> Iterator[tuple[str, PlainNode]]:
        for k in self._h5:
            yield k, self[k]

    def read(self, name: str | None = None, *, order: str = "julia") -> Any:
        try:
            if name is None:
                return {k: _read_object(self._h5, self._h5[k], order) for k in self._h5}
            return self[name].read(order=order)
        except (OSError, RuntimeError) as err:
            raise FormatError(f"h5py could not read the file: {err}") from err

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._h5.close()

    def __enter__(self) -> PlainFile:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
