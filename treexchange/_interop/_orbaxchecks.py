"""The damage checks of an orbax import: what is refused before orbax or tensorstore reads it.

orbax checkpoints come from anywhere (a JAX run, another tool, a copy cut short), and orbax and
tensorstore trust what they read: a ``.zarray`` nested 10⁵ deep overflows tensorstore's stack (a
crash), one saying 192 GiB makes it allocate them (``std::bad_alloc`` aborts the process), a tree
naming another dtype makes the restore cast silently, an array left out of the tree or of
``_METADATA`` is left out of the values without a word, and their own exceptions are whatever
their code met. So :mod:`._orbax` loads and saves, and calls these first: each refusal is a
:class:`FormatError` (or a :class:`LimitError` for a size or depth no process can hold) naming
the checkpoint, the array and its tree path (``tests/test_fuzz_orbax.py`` found them).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .._errors import FormatError, LimitError, TreePath, TreexchangeError
from .._limits import DEFAULT_LIMITS
from . import _treejson as tj
from ._safetensors import TensorPlan


@contextmanager
def reading(directory: Path) -> Iterator[None]:
    """orbax and tensorstore reading a damaged checkpoint raise whatever their code meets
    (ValueError, KeyError, TypeError, FileNotFoundError, json's errors, a RecursionError):
    each is a FormatError (a LimitError for running out of room) naming the checkpoint, with the
    first line of what they said. treexchange's own errors pass as they are."""
    try:
        yield
    except TreexchangeError:
        raise
    except (RecursionError, MemoryError) as err:
        raise LimitError(f"{directory}: orbax ran out of room reading the checkpoint ({said(err)})") from err
    except Exception as err:
        raise FormatError(f"{directory}: not a readable orbax checkpoint: {said(err)}") from err


def said(err: BaseException) -> str:
    """``ValueError: NOT_FOUND: …``: the first line of what another library said, for a message
    of ours (orbax's and tensorstore's run to many lines of C++ context)."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else ""
    text = text if len(text) <= 300 else text[:299] + "…"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


_METADATA_FILES = frozenset(
    {
        "_METADATA",
        "_CHECKPOINT_METADATA",
        "_sharding",
        "metadata",
        ".zarray",
        ".zattrs",
        ".zgroup",
        "zarr.json",
    }
)
METADATA_DEPTH = 256
"""Nesting orbax's and zarr's JSON files may have (their own nest a few levels; orbax flattens a
tree's keys). tensorstore parses zarr's recursively on a thread of its own and overflows its stack
at some 10⁵ levels (a crash, not an exception); Python's json stops at the recursion limit."""


def check_metadata_depth(directory: Path, tree_item: str) -> dict[Path, bytes]:
    """Refuse (LimitError) a checkpoint whose JSON metadata files (orbax's, zarr's ``.zarray``
    beside arrays stored without OCDBT) nest deeper than ``METADATA_DEPTH``; the ``tree_item``
    (treexchange's) is checked apart, with the depth a tree document may have. Links are not
    followed (a link to a directory above would loop). Returns the zarr metadata read (by the
    array's directory), which :func:`zarr_layouts` takes rather than read every file again."""
    zarr: dict[Path, bytes] = {}
    for parent, dirs, files in os.walk(directory):
        if Path(parent).name == tree_item and Path(parent).parent == directory:
            dirs.clear()
            continue
        for name in files:
            if name in _METADATA_FILES or Path(parent).name == "array_metadatas":
                file = Path(parent, name)
                try:
                    raw = file.read_bytes()
                except OSError:
                    continue  # (orbax says what is wrong with it, if it reads it)
                if tj.nests_deeper(raw, METADATA_DEPTH):
                    raise LimitError(
                        f"{file}: JSON nested deeper than the {METADATA_DEPTH} levels orbax's metadata has"
                    )
                if name.encode() in _ZARR_NAMES:
                    zarr[file.parent] = raw
    return zarr


def check_tree_arrays(
    stored: list[tuple[TreePath, dict[str, Any]]], kept: list[tuple[TreePath, dict[str, Any]]]
) -> None:
    """A tree document's array nodes, those ``stored`` in the ``state`` item and those ``kept``
    in the tree (``inline``), are what :mod:`._orbax` writes, or a FormatError: a kept one has no
    elements (it reads back as zeros of its shape: a damaged tree's would be wrong values), a
    stored one names its array, and the names make one nested ``dict`` (:func:`_check_names`)."""
    for p, n in kept:
        if 0 not in n["shape"]:
            raise FormatError(
                f"tree metadata: an inline array of shape {tuple(n['shape'])} (only arrays "
                "without elements are kept in the tree)",
                path=p,
            )
    for p, n in stored:
        if not isinstance(n.get("name"), str):
            raise FormatError("tree metadata: an array node without the name of its array", path=p)
    _check_names(stored)


def _check_names(arrays: list[tuple[TreePath, dict[str, Any]]]) -> None:
    """The names of a tree document's arrays make one nested ``dict`` (``_orbax._nested``): no empty
    part, no name that is a part of another (``a.b`` and ``a.b.c``), or a FormatError."""
    names = {n["name"] for _, n in arrays}
    for p, n in arrays:
        parts = n["name"].split(".")
        if "" in parts:
            raise FormatError(f"tree metadata: the array name {n['name']!r} has an empty part", path=p)
        for i in range(1, len(parts)):
            if ".".join(parts[:i]) in names:
                raise FormatError(
                    f"tree metadata: the array names {'.'.join(parts[:i])!r} and {n['name']!r} clash "
                    "(an array cannot hold another)",
                    path=p,
                )


Layout = tuple[tuple[int, ...], np.dtype | None]
"""An array's shape and dtype as its zarr metadata says (``None``: a dtype numpy does not name)."""


def zarr_layouts(item: Path, files: Mapping[Path, bytes]) -> dict[str, Layout]:
    """The layout of every array of a PyTree item (by its name, ``a.b.c``), from its zarr
    metadata read as text: through tensorstore's key-value store from the item's OCDBT database,
    or, for arrays stored without one, from their ``.zarray`` ``files`` (by the array's directory,
    as :func:`check_metadata_depth` read and checked them). No array is opened, and
    neither orbax's ``_METADATA`` nor ``_sharding`` (which restoring to numpy does not need) is
    read. Metadata that is not an array's (a damaged ``.zarray``) is a FormatError naming the
    array, and metadata nested deeper than ``METADATA_DEPTH`` a LimitError, before orbax hands
    it to tensorstore (which overflows its stack on the one and leaves a callback failing on a
    closed event loop, a traceback on stderr, on the other); so is an OCDBT database that cannot
    be read (orbax would leave a task's exception unretrieved, another traceback)."""
    texts: list[tuple[str, bytes]] = []
    if (item / "manifest.ocdbt").is_file():
        import tensorstore as ts  # (installed with orbax-checkpoint)

        try:
            store = ts.KvStore.open(
                {"driver": "ocdbt", "base": {"driver": "file", "path": f"{item}/"}}
            ).result()
            keys = [k for k in store.list().result() if k.endswith(_ZARR_KEYS)]
            reads = [(k, store.read(k)) for k in keys]
            texts = [
                (k.decode("utf-8", "replace").rsplit("/", 1)[0], bytes(r.result().value)) for k, r in reads
            ]
        except Exception as err:  # (tensorstore's: a damaged database, which no array is read from)
            raise FormatError(f"{item}: its OCDBT database cannot be read: {said(err)}") from err
        for name, raw in texts:
            if tj.nests_deeper(raw, METADATA_DEPTH):
                raise LimitError(
                    f"{item}: the zarr metadata of array {name!r} is JSON nested deeper than {METADATA_DEPTH}"
                )
    else:  # (files checked for their depth as they were read)
        texts = [(os.path.relpath(d, item), raw) for d, raw in files.items() if d.is_relative_to(item)]
    out: dict[str, Layout] = {}
    for name, raw in texts:
        layout = _zarr_layout(raw)
        if layout is None:
            raise FormatError(f"{item}: the zarr metadata of array {name!r} is damaged (no shape and dtype)")
        out[name] = layout
    return out


_ZARR_NAMES = (b".zarray", b"zarr.json")
_ZARR_KEYS = tuple(b"/" + n for n in _ZARR_NAMES)


def _zarr_layout(raw: bytes) -> Layout | None:
    """``(shape, dtype)`` of zarr 2 (``.zarray``: ``dtype``) or 3 (``zarr.json``: ``data_type``)
    metadata, or ``None`` for text that is not such metadata."""
    # ml_dtypes comes with jax (optional here); once imported, numpy knows "bfloat16"
    import ml_dtypes  # noqa: F401

    try:
        meta = json.loads(raw)
        shape = tuple(meta["shape"])
        name = meta.get("dtype", meta.get("data_type"))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        return None
    try:
        dtype: np.dtype | None = np.dtype(name) if isinstance(name, str) else None
    except TypeError:
        dtype = None
    return shape, dtype


def check_all_named(directory: Path, item: Path, stored: Mapping[str, Layout], named: set[str]) -> None:
    """Every array ``stored`` in the ``item`` (``state``) of a treexchange checkpoint is one the
    tree ``named``, or a FormatError naming the others: the import restores what the tree names,
    and an array added to the item with orbax after treexchange wrote it (an optimiser's state
    saved beside the parameters), or a tree from another save, would be left out without a word.
    orbax adds no arrays of its own to an item (only JSON: ``_METADATA``, ``_sharding``, its
    ``array_metadatas``), so every array stored is the user's. The message says how to read them
    all: the item alone is a plain PyTree checkpoint."""
    unnamed = sorted(set(stored) - named)
    if not unnamed:
        return
    raise FormatError(
        f"{directory}: its {item.name!r} item holds {len(unnamed)} array{'s' * (len(unnamed) > 1)} its "
        f"treexchange tree does not name, which loading would leave out: {tj.some_names(unnamed)} (added "
        "with orbax after treexchange wrote the checkpoint, or the tree is another save's). The "
        "item alone is a plain orbax checkpoint, read with every array and without the tree's other "
        f"values by load_orbax({str(item)!r}) or treexchange convert {item} OUT.jld2"
    )


def check_stored(
    directory: Path,
    item: Path,
    stored: Mapping[str, Layout],
    tensors: list[TensorPlan],
    held_whole: Callable[[TensorPlan], bool],
) -> None:
    """Each array the tree names, as the ``item``'s zarr metadata describes it (``stored``, from
    :func:`zarr_layouts`), has the tree's shape and dtype and fits in memory, or the checkpoint
    is refused before anything is restored: tensorstore allocates what an array's ``.zarray``
    says, and aborts the process (``std::bad_alloc``) when a lying one asks for more than there
    is. An array whose metadata cannot be read is left to the restore, which is compared with
    the tree (``roots``). Only an array ``held_whole`` by this host is bounded (one placed on
    devices with ``sharding=`` is not held whole here)."""
    if not item.is_dir():
        raise FormatError(
            f"{directory}: the tree names {len(tensors)} arrays and there is no {item.name!r} item",
            path=tensors[0].path,
        )
    bound = memory_bound()
    for t in tensors:
        if held_whole(t):
            check_fits(t.nbytes, bound, t.name, t.path)
        if t.name not in stored:
            continue
        shape, dtype = stored[t.name]
        if shape != t.shape or (dtype is not None and dtype != t.dtype):
            said = dtype if dtype is not None else "an array of"
            raise FormatError(
                f"array {t.name!r} is {said} {shape}, the tree says {t.dtype} {t.shape}", path=t.path
            )


def check_plain(
    directory: Path, layouts: dict[str, Layout], leaves: list[tuple[tuple[str, ...], Any]]
) -> None:
    """A plain PyTree checkpoint at ``directory``, its arrays' zarr ``layouts`` and the ``leaves``
    of orbax's metadata tree, is restored whole, or refused before: orbax reads an array from its
    metadata for each one stored, lists each one stored (it restores the tree its ``_METADATA``
    lists: an array stored and not listed, a damaged entry's, would be left out of the values
    without a word), and every array fits in memory, one by one and all at once."""
    meta = [(k, m) for k, m in leaves if is_array(m)]
    if layouts and not meta:  # (else orbax's restore fails on an empty tree, saying only that)
        raise FormatError(
            f"{directory}: orbax reads no array from its metadata, and {len(layouts)} are stored "
            "(its _METADATA or _sharding is damaged)"
        )
    unlisted = sorted(set(layouts) - {".".join(k) for k, _ in leaves})
    if unlisted:
        raise FormatError(
            f"{directory}: arrays stored and not in orbax's metadata (_METADATA damaged): "
            + tj.some_names(unlisted)
        )
    bound = memory_bound()  # (restored in one go: all of it at once)
    total = 0
    for k, v in meta:
        shape, dtype = shape_dtype(v, ".".join(k), ("state", *k))
        nbytes = math.prod(shape) * dtype.itemsize
        check_fits(nbytes, bound, ".".join(k), ("state", *k))
        total += nbytes
    if bound is not None and total > bound:
        raise LimitError(f"{directory}: {total} bytes to restore at once, more than this process can hold")


def is_array(meta: Any) -> bool:
    """Whether orbax's metadata of a leaf is an array's (a shape and a dtype)."""
    return hasattr(meta, "shape") and hasattr(meta, "dtype")


def shape_dtype(meta: Any, name: str, path: TreePath) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype orbax's metadata gives an array, or a FormatError (a damaged
    ``.zarray`` can say anything: no shape, negative sizes, a dtype numpy does not have)."""
    try:
        shape = tuple(int(d) for d in meta.shape)
        dtype = np.dtype(meta.dtype)
    except (TypeError, ValueError) as err:
        raise FormatError(
            f"array {name!r}: orbax's metadata gives no shape and dtype ({err})", path=path
        ) from None
    if any(d < 0 for d in shape):
        raise FormatError(f"array {name!r}: orbax's metadata gives the shape {shape}", path=path)
    return shape, dtype


def memory_bound() -> int | None:
    """Bytes one restore may ask for: the machine's memory, and what a cap on this process's
    address space leaves. tensorstore allocates each array whole, and when it cannot, it aborts
    the process (``std::bad_alloc``): a size it could never have is refused before it is asked."""
    bounds: list[int] = []
    try:
        bounds.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    try:
        import resource  # (Unix only)

        cap = resource.getrlimit(resource.RLIMIT_AS)[0]
        if cap != resource.RLIM_INFINITY:
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            bounds.append(max(cap - used, 0))
    except (ImportError, ValueError, OSError):  # pragma: no cover - not Linux
        pass
    return min(bounds) if bounds else None


def check_fits(nbytes: int, bound: int | None, name: str, path: TreePath) -> None:
    if nbytes > DEFAULT_LIMITS.max_array_bytes or (bound is not None and nbytes > bound):
        raise LimitError(
            f"array {name!r}: {nbytes} bytes to restore, more than this process can hold", path=path
        )


def checkpoints_inside(directory: Path, tree_item: str, scan: int = 1000) -> str:
    """``" (it holds: 1/default, 2/default)"``: the checkpoints one or two levels down (a
    CheckpointManager's steps, a composite checkpoint's items: a PyTree one, or one with
    treexchange's ``tree_item``), for the message refusing ``directory``; ``""`` when there is
    none. At most ``scan`` entries are looked at."""
    found: list[str] = []
    todo = [(directory, 0)]
    seen = 0
    while todo and seen < scan:
        here, level = todo.pop(0)
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)[:scan]
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if not entry.is_dir(follow_symlinks=False):
                continue
            path = Path(entry.path)
            if (path / "_METADATA").is_file() or (path / tree_item).is_dir():
                found.append(str(path.relative_to(directory)))
            elif level == 0:
                todo.append((path, 1))
    if not found:
        return ""
    more = f", and {len(found) - 5} more" if len(found) > 5 else ""
    return f" (it holds: {', '.join(found[:5])}{more})"
