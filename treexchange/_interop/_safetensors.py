"""safetensors files (single, or sharded with ``model.safetensors.index.json``) <-> value trees.

**Names and axes.** Tensors are named in PyTorch's ``state_dict`` convention
(:mod:`._flatnames`: ``layers.0.weight``). Each tensor has the array's *Julia* shape and holds its
elements row-major, so ``t[i-1, j-1] == W[i, j]`` — the shape ``treexchange.load`` gives, and the
one PyTorch uses for ``Dense``/``Linear`` weights ``(out, in)``. Writing transposes column-major
Julia arrays into that order block by block (never a second full copy).

**The tree.** The header's ``__metadata__`` holds ``format = "pt"`` (what the Hugging Face loaders
expect) and ``treexchange``: the JSON skeleton of every top-level value (:mod:`._treejson`:
structure, field names, Julia types, ``()``/``nothing`` markers, non-array leaves), with each
array node naming its tensor. A file with that entry converts back to exactly the values it came
from. A file without it (written by PyTorch) reads as one NamedTuple of its tensors, by name.

**dtypes.** bool, int8…int64, uint8…uint64, float16, bfloat16, float32, float64 and complex64 are
safetensors dtypes; complex128 has none and is stored as float64 with a trailing axis of 2
(re, im), marked ``"transform": "complex-as-real"`` in its array node.

**Memory.** Writing reads one array at a time from the JLD2 file (:mod:`._source`); reading maps
the file and hands out zero-copy views of each tensor (the header is first checked by the
``safetensors`` package's own ``safe_open``), so no step holds a copy of the whole model.
"""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from .._atomic import atomic_write
from .._errors import ConversionError, FormatError, TreePath, UnsupportedError, format_path
from .._gc import gc_paused
from .._jld2._writer_arrays import column_major_pieces
from .._values import NamedTuple
from . import _treejson as tj
from ._flatnames import NameTable
from ._source import fetch

METADATA_KEY = "treexchange"
INDEX_SUFFIX = ".safetensors.index.json"
PLAIN_ROOT = "model"  # the root name of a file without treexchange metadata (docs/safetensors.md)
ORDER_KEY = "treexchange.state_dict_order"  # a state_dict's key order, recorded when we write one

_ST_DTYPES: dict[str, str] = {
    "bool": "BOOL",
    "int8": "I8",
    "uint8": "U8",
    "int16": "I16",
    "uint16": "U16",
    "int32": "I32",
    "uint32": "U32",
    "int64": "I64",
    "uint64": "U64",
    "float16": "F16",
    "bfloat16": "BF16",
    "float32": "F32",
    "float64": "F64",
    "complex64": "C64",
}
_FROM_ST = {v: k for k, v in _ST_DTYPES.items()}
COMPLEX_AS_REAL = "complex-as-real"

Progress = Callable[[int], None]
"""Called with the number of bytes just written (for a progress bar)."""


@dataclass
class TensorPlan:
    """One array of the tree and the tensor it becomes."""

    name: str
    path: TreePath
    source: Any  # a numpy array or a lazy array node
    dtype: np.dtype  # the array's dtype (Julia side)
    shape: tuple[int, ...]  # the array's Julia shape
    transform: str = ""

    @property
    def stored_dtype(self) -> str:
        return "F64" if self.transform == COMPLEX_AS_REAL else _ST_DTYPES[self.dtype.name]

    @property
    def stored_shape(self) -> tuple[int, ...]:
        return (*self.shape, 2) if self.transform == COMPLEX_AS_REAL else self.shape

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass
class ExportPlan:
    """What writing a tree produces: the tree metadata and one :class:`TensorPlan` per array."""

    document: dict[str, Any]
    tensors: list[TensorPlan] = field(default_factory=list)
    layout: str = "row-major"  # how arrays are stored: "row-major" bytes, or "logical" arrays (orbax)
    device_arrays: list[TreePath] = field(default_factory=list)  # (GPU pointers written as they are)

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def mapping_lines(self, *, reverse: bool = False) -> list[str]:
        """One line per tensor: ``julia.path -> name  shape dtype  transform`` (``reverse``: the
        tensor name first), for ``--dry-run``."""
        return [
            mapping_line(t.name, t.path, t.shape, t.dtype, self._transform(t), reverse=reverse)
            for t in self.tensors
        ]

    def _transform(self, t: TensorPlan) -> str:
        return transform_of(t) if self.layout == "row-major" else "none"


def transform_of(t: TensorPlan) -> str:
    """What happens to the elements on the way: ``complex-as-real``, ``row-major`` (an array of
    2 or more dimensions is reordered from Julia's column-major layout) or ``none``."""
    if t.transform:
        return t.transform
    return "row-major" if len(t.shape) >= 2 else "none"


def mapping_line(
    name: str,
    path: TreePath,
    shape: tuple[int, ...],
    dtype: np.dtype,
    transform: str,
    *,
    reverse: bool,
) -> str:
    """One ``--dry-run`` line (see :meth:`ExportPlan.mapping_lines`)."""
    julia = format_path(path)
    ends = f"{name} -> {julia}" if reverse else f"{julia} -> {name}"
    return f"{ends}  {tuple(shape)} {np.dtype(dtype).name}  {transform}"


def plan_export(roots: Mapping[str, Any]) -> ExportPlan:
    """The tensors and tree metadata of ``roots`` (top-level name -> value); nothing is read.

    Example:
        >>> from treexchange import NamedTuple
        >>> state = NamedTuple(layers=(NamedTuple(weight=np.ones((2, 3), np.float32), σ=()),))
        >>> plan = plan_export({"model_state": state})
        >>> plan.mapping_lines()
        ['model_state.layers[1].weight -> layers.0.weight  (2, 3) float32  row-major']
    """
    names = NameTable(drop_root=len(roots) == 1)
    tensors: list[TensorPlan] = []

    def on_array(array: Any, path: TreePath) -> dict[str, Any]:
        dtype = np.dtype(array.dtype).newbyteorder("=")
        shape = tuple(int(d) for d in array.shape)
        name = names.add(path)
        transform = COMPLEX_AS_REAL if dtype == np.complex128 else ""
        if dtype.name not in _ST_DTYPES and not transform:
            raise ConversionError(f"arrays of {dtype} cannot be stored in safetensors", path=path)
        tensors.append(TensorPlan(name, path, array, dtype, shape, transform))
        node = {
            "name": name,
            "dtype": dtype.name,
            "shape": list(shape),
            "julia_type": tj.julia_array_type(dtype, len(shape)),
        }
        if transform:
            node["transform"] = transform
        return node

    sharing = tj.Sharing()  # (one per file: its roots may share objects)
    with gc_paused():  # (a node and a record per object, all kept: collecting them is wasted time)
        encoded = [[name, tj.encode(value, on_array, (name,), sharing)] for name, value in roots.items()]
    document = {"format": tj.TREE_FORMAT, "version": sharing.version(), "axes": "julia-shape-row-major"}
    document["roots"] = encoded
    return ExportPlan(document, tensors, device_arrays=sharing.devices)


def save_safetensors(
    path: str | os.PathLike[str],
    roots: Mapping[str, Any],
    *,
    max_shard_size: int | None = None,
    progress: Progress | None = None,
) -> list[Path]:
    """Write ``roots`` (top-level name -> value, as :func:`treexchange.load` returns) as safetensors.

    With ``max_shard_size`` (bytes) and more data than that, the tensors go to
    ``<stem>-00001-of-0000N.safetensors`` files beside ``path`` and the index
    ``<stem>.safetensors.index.json`` is written (the Hugging Face convention); ``path`` itself is
    then not created. Every file is replaced atomically. Returns the files written (index last).

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> from treexchange import NamedTuple, load_safetensors, save_safetensors
        >>> path = os.path.join(tempfile.mkdtemp(), "model.safetensors")
        >>> state = NamedTuple(layers=(NamedTuple(weight=np.ones((2, 3), np.float32), σ=()),))
        >>> _ = save_safetensors(path, {"model_state": state})
        >>> from safetensors import safe_open
        >>> with safe_open(path, framework="numpy") as f:
        ...     list(f.keys()), f.get_tensor("layers.0.weight").shape
        (['layers.0.weight'], (2, 3))
        >>> load_safetensors(path)["model_state"] == state
        True
    """
    return write_plan(path, plan_export(roots), max_shard_size=max_shard_size, progress=progress)


def write_plan(
    path: str | os.PathLike[str],
    plan: ExportPlan,
    *,
    max_shard_size: int | None = None,
    progress: Progress | None = None,
) -> list[Path]:
    """Write the tensors of ``plan`` (see :func:`save_safetensors`)."""
    target = Path(path)
    tree_json = tj.dumps_document(plan.document, ensure_ascii=False, separators=(",", ":"))
    tj.refuse_lone_surrogates(tree_json, plan.document)  # (the header is UTF-8: refused before writing)
    shards = _split(plan.tensors, max_shard_size)
    if len(shards) <= 1:
        _write_file(target, plan.tensors, {"format": "pt", METADATA_KEY: tree_json}, progress)
        return [target]
    stem = target.name[: -len(".safetensors")] if target.name.endswith(".safetensors") else target.name
    written: list[Path] = []
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards, 1):
        shard_path = target.with_name(f"{stem}-{i:05d}-of-{len(shards):05d}.safetensors")
        _write_file(shard_path, shard, {"format": "pt"}, progress)
        written.append(shard_path)
        weight_map.update((t.name, shard_path.name) for t in shard)
    index = {
        "metadata": {"total_size": plan.total_bytes, "format": "pt", METADATA_KEY: plan.document},
        "weight_map": weight_map,
    }
    index_path = target.with_name(stem + INDEX_SUFFIX)
    text = tj.dumps_document(index, ensure_ascii=False, indent=1).encode("utf-8")

    def write_index(f: BinaryIO) -> None:
        f.write(text)

    atomic_write(index_path, write_index)
    written.append(index_path)
    return written


def _split(tensors: list[TensorPlan], max_bytes: int | None) -> list[list[TensorPlan]]:
    if max_bytes is None:
        return [tensors]
    if max_bytes <= 0:
        raise ValueError("max_shard_size must be positive")
    shards: list[list[TensorPlan]] = [[]]
    size = 0
    for t in tensors:
        if shards[-1] and size + t.nbytes > max_bytes:
            shards.append([])
            size = 0
        shards[-1].append(t)
        size += t.nbytes
    return shards


def _write_file(
    path: Path, tensors: list[TensorPlan], metadata: dict[str, str], progress: Progress | None
) -> None:
    # Larger elements first (stable otherwise): every tensor then starts at a multiple of its
    # element size, as the safetensors package lays files out, so readers can map them in place.
    ordered = sorted(tensors, key=lambda t: -np.dtype(_np_dtype(t.stored_dtype)).itemsize)
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for t in ordered:
        header[t.name] = {
            "dtype": t.stored_dtype,
            "shape": list(t.stored_shape),
            "data_offsets": [offset, offset + t.nbytes],
        }
        offset += t.nbytes
    raw = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)

    def write(f: BinaryIO) -> None:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in ordered:
            _write_tensor(f, t, progress)

    atomic_write(path, write)


def _write_tensor(f: BinaryIO, t: TensorPlan, progress: Progress | None) -> None:
    array = fetch(t.source)
    if array.shape != t.shape or array.dtype.newbyteorder("=") != t.dtype:
        raise ConversionError("array changed while it was written", path=t.path)
    written = 0
    # Row-major bytes of ``array`` are the column-major bytes of its transpose.
    for piece in column_major_pieces(array.T):
        f.write(piece)
        written += len(piece)
        if progress is not None:
            progress(len(piece))
    del array  # one array alive at a time
    if written != t.nbytes:
        raise ConversionError(f"wrote {written} bytes for a {t.nbytes}-byte array", path=t.path)


def _np_dtype(st_dtype: str) -> np.dtype:
    try:
        return tj.DTYPES[_FROM_ST[st_dtype]]
    except KeyError:
        raise UnsupportedError(f"safetensors dtype {st_dtype} has no numpy counterpart here") from None


# --- reading ---------------------------------------------------------------------------------


@dataclass
class StoredTensor:
    """A tensor of a safetensors file: where it is, and how to read it (zero-copy)."""

    name: str
    file: Path
    dtype: np.dtype
    shape: tuple[int, ...]
    start: int  # absolute file offset
    nbytes: int


class SafetensorsSource:
    """An open safetensors file or sharded set: its tensors (read on demand) and metadata.

    Example:
        >>> import os, tempfile
        >>> path = os.path.join(tempfile.mkdtemp(), "x.safetensors")
        >>> _ = save_safetensors(path, {"x": np.arange(6, dtype=np.int16).reshape(2, 3)})
        >>> src = SafetensorsSource(path)
        >>> list(src.tensors), src.array("x")[1, 2]
        (['x'], np.int16(5))
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.tensors: dict[str, StoredTensor] = {}
        self.document: dict[str, Any] | None = None
        self._maps: dict[Path, mmap.mmap] = {}
        self.metadata: dict[str, str] = {}  # the file's (or index's) string metadata
        if self.path.name.endswith(INDEX_SUFFIX):
            index = _read_json(self.path)
            meta = index.get("metadata") or {}
            self.metadata = {k: v for k, v in meta.items() if isinstance(v, str)}
            doc = meta.get(METADATA_KEY)
            self.document = doc if isinstance(doc, dict) else None
            weight_map = index.get("weight_map")
            if not isinstance(weight_map, dict):
                raise FormatError(f"{self.path}: no weight_map in the index")
            files = list(dict.fromkeys(weight_map.values()))
            for name in files:
                self._scan(self.path.with_name(name))
            missing = sorted(set(weight_map) - set(self.tensors))
            if missing:
                raise FormatError(f"{self.path}: tensors listed in the index but in no shard: {missing[:5]}")
        else:
            meta = self._scan(self.path)
            self.metadata = meta
            text = meta.get(METADATA_KEY)
            if text is not None:
                self.document = tj.loads_document(text, f"{self.path}: treexchange metadata")

    def _scan(self, file: Path) -> dict[str, str]:
        """Check ``file`` with the safetensors package and list its tensors."""
        try:
            from safetensors import safe_open  # safetensors is optional
        except ImportError as err:  # pragma: no cover - the extra is installed in CI
            raise UnsupportedError(
                "reading safetensors files needs the 'safetensors' package "
                "(the 'safetensors' extra: pip install '.[safetensors]' in a clone of treexchange)"
            ) from err

        try:
            with safe_open(os.fspath(file), framework="numpy") as f:
                metadata = dict(f.metadata() or {})
                described = {name: f.get_slice(name) for name in f.keys()}
                infos = {n: (s.get_dtype(), tuple(s.get_shape())) for n, s in described.items()}
        except OSError:
            raise
        except Exception as err:  # the package raises its own SafetensorError
            raise FormatError(f"{file}: not a valid safetensors file: {err}") from None
        with open(file, "rb") as fh:
            (size,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(size))
        base = 8 + size
        for name, (st_dtype, shape) in infos.items():
            begin, end = header[name]["data_offsets"]
            dtype = _np_dtype(st_dtype)
            if name in self.tensors:
                raise FormatError(f"tensor {name!r} is stored twice (in {file.name})")
            self.tensors[name] = StoredTensor(name, file, dtype, shape, base + begin, end - begin)
        return metadata

    def array(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a read-only zero-copy view of the file (C order, stored shape)."""
        t = self.tensors[name]
        if t.nbytes == 0:
            return np.zeros(t.shape, t.dtype)
        m = self._maps.get(t.file)
        if m is None:
            with open(t.file, "rb") as fh:
                m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
            self._maps[t.file] = m
        count = t.nbytes // t.dtype.itemsize
        flat = np.frombuffer(m, dtype=t.dtype.newbyteorder("<"), count=count, offset=t.start)
        return flat.reshape(t.shape)

    def roots(self) -> dict[str, Any]:
        """The values stored: the tree from the metadata, else ``{"model": NamedTuple of tensors}``."""
        if self.document is None:
            ordered = sorted(self.tensors.values(), key=lambda t: (t.file.name, t.start))
            return {PLAIN_ROOT: NamedTuple((t.name, self.array(t.name)) for t in ordered)}
        roots = tj.document_roots(self.document, str(self.path))
        named: set[str] = set()
        for name, node in roots:  # (every array node checked before any is read)
            named.update(n["name"] for _, n in tj.array_nodes(node, (name,), named=True))
        self._check_all_named(named)
        sharing = tj.Sharing(self._file_bytes(), str(self.path))
        return {name: tj.decode(node, self._get, (name,), sharing) for name, node in roots}

    def _check_all_named(self, named: set[str]) -> None:
        """Every tensor stored is one the tree metadata ``named``, or a FormatError naming the
        others: the tree's values are what it names, and a tensor added to the file since
        treexchange wrote it (``safetensors``' ``save_file`` of the tensors read plus new ones,
        with the metadata kept) would be left out of them without a word. The message says how
        to read every tensor: the safetensors package's own ``load_file``, without the tree."""
        unnamed = sorted(set(self.tensors) - named)
        if not unnamed or not named <= self.tensors.keys():
            return  # (a tensor named and not stored: the read says which, with its tree path)
        s = "s" * (len(unnamed) > 1)
        raise FormatError(
            f"{self.path}: holds {len(unnamed)} tensor{s} its treexchange tree metadata does not name, "
            f"which loading would leave out: {tj.some_names(unnamed)} (added after treexchange wrote "
            "the file, or the metadata is another file's). safetensors.numpy.load_file (on each "
            "shard of a sharded set) reads every tensor, without the tree"
        )

    def _file_bytes(self) -> int:
        """The bytes of the file (all shards and the index, when sharded)."""
        files = {t.file for t in self.tensors.values()} | {self.path}
        return sum(f.stat().st_size for f in files if f.is_file())

    def _get(self, node: dict[str, Any], path: TreePath) -> np.ndarray:
        name = node["name"]
        if name not in self.tensors:
            raise FormatError(f"tensor {name!r} named by the tree metadata is not in the file", path=path)
        array = self.array(name)
        dtype = tj.DTYPES[node["dtype"]]
        if node.get("transform") == COMPLEX_AS_REAL:
            array = array.view(np.complex128)[..., 0]
        shape = tuple(node["shape"])
        if array.shape != shape or array.dtype.newbyteorder("=") != dtype:
            raise FormatError(
                f"tensor {name!r} is {array.dtype} {array.shape}, the tree says {dtype} {shape}", path=path
            )
        return array

    def mapping_lines(self) -> list[str]:
        """One line per tensor: ``name -> julia.path  shape dtype  transform`` (``--dry-run``)."""
        if self.document is None:
            stem = self.path.name.split(".safetensors")[0] or "state"
            return [
                mapping_line(t.name, (stem, t.name), t.shape, t.dtype, "none", reverse=True)
                for t in self.tensors.values()
            ]
        lines = []
        named: set[str] = set()
        for name, root in tj.document_roots(self.document, str(self.path)):
            for path, node in tj.array_nodes(root, (name,), named=True):
                named.add(node["name"])
                transform = node.get("transform") or ("row-major" if len(node["shape"]) >= 2 else "none")
                dtype = tj.DTYPES[node["dtype"]]
                lines.append(
                    mapping_line(node["name"], path, tuple(node["shape"]), dtype, transform, reverse=True)
                )
        self._check_all_named(named)  # (a tensor the lines would not list is refused here too)
        return lines

    def release_pages(self) -> None:
        """Drop the mapped pages from this process (``MADV_DONTNEED``). The maps are read-only
        views of the files, so nothing is lost: a page touched again is read back from the page
        cache or the disk. Called while a conversion writes, it keeps the resident memory of a
        multi-GB source down to what was read since the last call."""
        advice = getattr(mmap, "MADV_DONTNEED", None)
        if advice is None:  # pragma: no cover - not Linux/BSD
            return
        for m in self._maps.values():
            m.madvise(advice)

    def close(self) -> None:
        """Unmap the files (arrays handed out must no longer be used)."""
        for m in self._maps.values():
            try:
                m.close()
            except BufferError:  # views still alive: the map goes when they do
                pass
        self._maps.clear()


def load_safetensors(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a safetensors file (or ``*.safetensors.index.json``) into values.

    Arrays are read-only views of the file in the tree's Julia shape. A file written by
    :func:`save_safetensors` gives back exactly the values written (one holding tensors its
    tree does not name, added since, is refused with a FormatError naming them); another file
    gives ``{"model": NamedTuple(name=tensor, ...)}`` in file order.

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> from safetensors.numpy import save_file
        >>> from treexchange import load_safetensors
        >>> path = os.path.join(tempfile.mkdtemp(), "linear.safetensors")
        >>> save_file({"weight": np.eye(2, dtype=np.float32), "bias": np.zeros(2, np.float32)}, path)
        >>> tree = load_safetensors(path)["model"]
        >>> sorted(tree), tree.weight.shape
        (['bias', 'weight'], (2, 2))
    """
    return SafetensorsSource(path).roots()


def is_safetensors_path(path: str | os.PathLike[str]) -> bool:
    """Whether a file name is a safetensors file or index (by its extension)."""
    name = os.fspath(path)
    return name.endswith(".safetensors") or name.endswith(INDEX_SUFFIX)


def _read_json(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:  # (bytes: text that is not UTF-8 is a FormatError, not a UnicodeDecodeError)
        value = tj.loads_document(f.read(), str(path))
    if not isinstance(value, dict):
        raise FormatError(f"{path}: not a JSON object")
    return value
