"""``treexchange inspect``: a file's tree as readable text or as JSON Lines.

The JSON Lines form is a contract (docs/design.md, "Contracts that scripts and checks rely on"):
one object per node, pre-order, with

* ``path``: list of segments, ``str`` for top-level names, group names, fields and dict keys
  (non-string dict keys are rendered as text: ``4``, ``"(1, 2)"``), ``int`` for tuple and
  vector positions, 1-based as in Julia (positions in N-d vectors are Julia's linear,
  column-major indices);
* ``kind``: ``namedtuple``, ``tuple``, ``vector``, ``dict``, ``struct``, ``array``, ``number``,
  ``bool``, ``string``, ``symbol``, ``singleton``;
* ``julia_type``: the Julia type as Julia prints it (``Array{Float32, 2}``, ``Tuple{}``);
* arrays: ``dtype`` (numpy's name; ``bfloat16``), ``shape`` (Julia order) and ``sha256`` (hex
  digest of the elements in Julia's column-major order, little-endian: the bytes JLD2 stores);
* number / bool / string / symbol: ``value``;
* ``note`` (only where the reader changed what the file holds, e.g. a BSON.jl Tracker array
  read as its data, its gradient dropped).

Values and digests are spelled by :mod:`treexchange._jsonform` (schemas spell them the same way):
JSON has no NaN or infinities: those floats are written as the strings ``"NaN"``,
``"Infinity"`` and ``"-Infinity"`` (also inside ``[re, im]`` pairs of complex numbers).
Integers wider than 64 bits (``Int128``, ``UInt128``, ``BigInt``) are decimal strings, as
are all values of those types; a ``BigFloat`` is its decimal text. Primitive bits types numpy
has no dtype for (``Char``, ``@enum`` values, pointers, a struct BSON.jl stored as raw bits) are
kind ``number`` with their bytes read as a little-endian signed integer, and ``shown``: the value
as Julia shows it (``'a'`` for a ``Char``, else the bits in hex, ``0x3c00``; the text view prints
that).
A type used as a value (``Float64`` in a field) is kind ``singleton`` with julia_type ``Type{Float64}``.
HDF5 groups (``"a/b"`` names) get no line of their own: their names appear as path segments.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np

from ._errors import TYPE_WIDTH, LimitError, TreexchangeError, clip_type, format_path
from ._gc import gc_paused
from ._jsonform import array_sha256, json_line, json_scalar
from ._juliatype import shared_renderings
from ._nodeproto import CONTAINER_KINDS, LazyFile, LazyNode
from ._recursion import stack_for_depth
from ._typeof import presented_dtype_name
from ._values import JuliaBits


class _TypeText:
    """``str(julia_type)``, computed once per type object during one listing (the reader shares
    type objects between nodes; a big type printed at thousands of nodes is printed once)."""

    def __init__(self) -> None:
        self._cache: dict[int, tuple[Any, str]] = {}

    def __call__(self, jt: Any) -> str:
        hit = self._cache.get(id(jt))
        if hit is not None and hit[0] is jt:
            return hit[1]
        text = str(jt)
        self._cache[id(jt)] = (jt, text)  # keeps jt alive, so its id stays unique
        return text


def node_record(node: Any, type_text: Any = str) -> dict[str, Any]:
    """The JSON Lines object of one node (arrays are read to hash them).

    Example:
        >>> import treexchange
        >>> import os, tempfile, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     node_record(f["a"])["shape"]
        [2]
    """
    rec: dict[str, Any] = {
        "path": list(node.path),
        "kind": node.kind,
        "julia_type": type_text(node.julia_type),
    }
    kind = node.kind
    if kind == "array":
        arr = np.asarray(node)
        rec["dtype"] = presented_dtype_name(arr.dtype)
        rec["shape"] = list(arr.shape)
        rec["sha256"] = array_sha256(arr)
    elif kind in ("number", "bool", "string", "symbol"):
        value = node.read()
        rec["value"] = json_scalar(value, node.julia_type)
        if isinstance(value, JuliaBits):  # the value the integer stands for, as Julia shows it
            rec["shown"] = value.shown()
    elif kind == "vector" and (dims := _matrix_shape(node)):
        rec["shape"] = list(dims)  # an Array{Any, N} of N > 1 dims: its length alone hides them
    note = getattr(node, "note", None)  # what the reader changed here (a BSON Tracker array)
    if note:
        rec["note"] = note
    return rec


def _matrix_shape(node: Any) -> tuple[int, ...] | None:
    """The dims of a container node that is an array of more than one dimension (a Julia
    ``Array{Any, 2}`` of structs); None for a vector or anything else."""
    if node.kind != "vector":
        return None
    shape = getattr(node, "shape", None)
    if not isinstance(shape, tuple) or len(shape) < 2:
        return None
    return tuple(int(d) for d in shape)


def node_budget(file: LazyFile) -> int:
    """How many nodes a walk of ``file`` (or of an entry in it) may visit: the file's
    ``Limits.max_nodes`` (by default ``max(10**6, 64 × file size)``).

    A walk lists each container object once (later places are back-references) but arrays and
    scalars at every place; a hostile file sharing leaves at every level of a deep structure
    could still make the listing long; the budget turns that into a LimitError.

    Example:
        >>> import treexchange
        >>> import os, tempfile, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     node_budget(f)
        1000000
    """
    return file.limits.nodes_for(file.file_size)


def walk_nodes(root: LazyNode, budget: int | None = None) -> Iterator[tuple[LazyNode, int]]:
    """Pre-order ``(node, depth)`` over a file, group or node; groups included.

    Each container object (a dataset, or a group) is descended into once: a later place that
    holds the same object (see :func:`walk_refs`) is yielded but not descended into, so a hard
    link to an ancestor group or a reference cycle ends, and a DAG costs one visit per object.

    Raises:
        LimitError: more than ``budget`` nodes (see :func:`node_budget`).

    Example:
        >>> import treexchange
        >>> import os, tempfile, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     [(node.path, depth) for node, depth in walk_nodes(f)]
        [((), 0), (('a',), 1)]
    """
    for node, depth, _ in walk_refs(root, budget):
        yield node, depth


def walk_refs(
    root: LazyNode, budget: int | None = None
) -> Iterator[tuple[LazyNode, int, tuple[Any, ...] | None]]:
    """Pre-order ``(node, depth, ref)``: ``ref`` is ``None``, or the path where the same container
    object was first listed (its children are then not listed again).

    Arrays and other leaves are listed at every place (their records do not grow with sharing);
    containers and groups that are the same HDF5 object as one listed before become
    back-references. ``ref`` is an ancestor's path for a cycle (a group hard-linked into itself,
    a self-referential mutable struct), another path for a shared object.

    Example:
        >>> import os, tempfile
        >>> import numpy as np
        >>> import treexchange
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     [(node.path, ref) for node, _, ref in walk_refs(f)]
        [((), None), (('a',), None)]
    """
    first: dict[int, tuple[Any, ...]] = {}
    stack: list[tuple[LazyNode, int]] = [(root, 0)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if budget is not None and seen > budget:
            raise LimitError(f"more than {budget} nodes to list (objects shared many times over?)")
        kind = node.kind  # containers and groups may be one object reached from several places
        address = node.object_address if kind == "group" or kind in CONTAINER_KINDS else None
        if address is not None:
            where = first.get(address)
            if where is not None:
                yield node, depth, where
                continue
            first[address] = tuple(node.path)
        yield node, depth, None
        for _, child in reversed(list(node.children())):
            stack.append((child, depth + 1))


def iter_records(file: LazyFile, name: str | None = None) -> Iterator[dict[str, Any]]:
    """JSON Lines records for every node of ``file``, or of its entry ``name`` (``"a/b"``; see
    :func:`select`), groups skipped, in pre-order; at most :func:`node_budget` of them.

    Example:
        >>> import treexchange
        >>> import os, tempfile, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     [(r["path"], r["kind"], r["julia_type"]) for r in iter_records(f)]
        [(['a'], 'array', 'Array{Float64, 1}')]
    """
    type_text = _TypeText()
    # Types are printed recursively: room on the stack for the deepest the limits admit; each
    # level of a nest prints the types below it again: rendered once (shared_renderings).
    with gc_paused(), stack_for_depth(file.limits.max_depth), shared_renderings():
        for node, _, ref in walk_refs(select(file, name), node_budget(file)):
            if ref is not None:
                yield {
                    "path": list(node.path),
                    "kind": node.kind,
                    "julia_type": type_text(node.julia_type),
                    "ref": list(ref),
                }
            elif node.kind != "group":
                yield node_record(node, type_text)


def json_lines(file: LazyFile, name: str | None = None) -> Iterator[str]:
    """The ``inspect --json`` output, one line per node (of the whole file, or of ``name``).

    Example:
        >>> import treexchange
        >>> import os, tempfile, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     print(next(json_lines(f))[:86])
        {"path": ["a"], "kind": "array", "julia_type": "Array{Float64, 1}", "dtype": "float64"
    """
    for rec in iter_records(file, name):
        yield json_line(rec)


def _human(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _clip(text: str, width: int | None = TYPE_WIDTH) -> str:
    return clip_type(text, width)


def text_lines(
    file: LazyFile, name: str | None = None, *, type_width: int | None = TYPE_WIDTH
) -> Iterator[str]:
    """The readable ``inspect`` output (of the whole file, or of ``name``): an indented tree,
    then totals.

    Each line: name, Julia type, and for arrays the Julia-order shape, dtype and byte size;
    for numbers, strings and symbols the value.

    Example:
        >>> import treexchange
        >>> import os, tempfile, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     for line in text_lines(f):
        ...         print(line)
        a: Array{Float64, 1}  2  float64  16 B
        -- 1 leaves, 1 arrays, 16 B of array data
    """
    # (types printed recursively; each nested level's type once: shared_renderings)
    with gc_paused(), stack_for_depth(file.limits.max_depth), shared_renderings():
        yield from _text_lines(select(file, name), type_width, node_budget(file))


def _text_lines(root: LazyNode, type_width: int | None, budget: int) -> Iterator[str]:
    leaves = arrays = nbytes = 0
    type_text = _TypeText()
    root_depth_offset = 0 if root.kind != "group" else 1
    for node, depth, ref in walk_refs(root, budget):
        if node.kind == "group" and not node.path and ref is None:
            continue
        seg = node.path[-1] if node.path else "<root>"
        label = f"[{seg}]" if isinstance(seg, int) else str(seg)
        indent = "  " * max(depth - root_depth_offset, 0)
        kind = node.kind
        jt = _clip(type_text(node.julia_type), type_width)
        note = getattr(node, "note", None)  # what the reader changed here: ends the line
        end = f"  [{note}]" if note else ""
        if ref is not None:
            where = format_path(ref) if ref else "/"  # the root group: "/", as HDF5 names it
            cyclic = tuple(node.path[: len(ref)]) == tuple(ref)
            note = f"cycle: back to {where}" if cyclic else f"same object as {where}"
            yield f"{indent}{label}{'/' if kind == 'group' else ''}: {jt}  ({note})"
            continue
        if kind == "group":
            n = len(node)
            yield f"{indent}{label}/  (group, {n} {'entry' if n == 1 else 'entries'})"
            continue
        if kind == "array":
            leaves += 1
            arrays += 1
            shape = tuple(node.shape or ())
            size = int(np.prod(shape, dtype=np.int64)) * np.dtype(node.dtype).itemsize
            nbytes += size
            dims = "×".join(str(d) for d in shape) if shape else "0-dim"
            dtype = presented_dtype_name(np.dtype(node.dtype))
            yield f"{indent}{label}: {jt}  {dims}  {dtype}  {_human(size)}{end}"
        elif kind in ("number", "bool", "string", "symbol"):
            leaves += 1
            read = node.read()
            value = json_scalar(read)
            shown = json.dumps(value, ensure_ascii=False) if kind in ("string", "symbol", "bool") else value
            if isinstance(read, JuliaBits):  # raw bits (a Char, a pointer, an @enum): not an integer
                shown = read.shown()
            elif kind == "symbol":
                shown = ":" + str(value)
            yield f"{indent}{label}: {jt} = {_clip(str(shown), 60)}{end}"
        elif kind == "singleton":
            leaves += 1
            yield f"{indent}{label}: {jt}{end}"
        else:
            n = len(node)
            matrix = _matrix_shape(node)  # (an Array{Any, 2}: its dims, not only its length)
            what = f"{kind} {'×'.join(map(str, matrix))}" if matrix else kind
            yield f"{indent}{label}: {jt}  ({what}, {n} {'entry' if n == 1 else 'entries'}){end}"
    yield f"-- {leaves} leaves, {arrays} arrays, {_human(nbytes)} of array data"


def select(f: LazyFile, name: str | None) -> LazyNode:
    """The node to inspect: the whole file, or one entry (``"a/b"``).

    Raises:
        TreexchangeError: no entry ``name`` in the file.

    Example:
        >>> import treexchange
        >>> import os, tempfile, numpy as np
        >>> path = os.path.join(tempfile.mkdtemp(), "demo.jld2")
        >>> treexchange.save(path, a=np.zeros(2))
        >>> with treexchange.open(path) as f:
        ...     select(f, None) is f, select(f, "a").path
        (True, ('a',))
    """
    if name is None:
        return f
    try:
        return f[name]
    except KeyError:
        raise TreexchangeError(f"no entry named {name!r} in the file") from None
