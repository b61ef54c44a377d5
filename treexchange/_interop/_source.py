"""A JLD2 file as a value tree whose big arrays are not read yet.

Converters walk the file's lazy nodes (:mod:`treexchange._nodeproto`): NamedTuples, tuples and
groups (the containers of a ``Flux.state`` or a Lux ``ps``) are rebuilt from their children,
numeric arrays stay lazy nodes (shape and dtype known, nothing read), every other value is read
whole (structs, dicts, strings... are small). :func:`fetch` then reads one array into memory of its
own (one ``pread``, no memory map), so a converter holds one array at a time.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._nodeproto import LazyNode, is_node
from .._reader import open as open_file
from .._values import NamedTuple
from ._treejson import Group


def lazy_tree(source: str | os.PathLike[str]) -> Group:
    """Every top-level name of a JLD2 file, arrays left unread (see the module docstring).

    Example:
        >>> import os, tempfile, treexchange as tx
        >>> path = os.path.join(tempfile.mkdtemp(), "m.jld2")
        >>> tx.save(path, model_state=tx.NamedTuple(w=np.ones((2, 3), np.float32), σ=()))
        >>> tree = lazy_tree(path)
        >>> node = tree["model_state"]["w"]
        >>> node.shape, fetch(node).flags.owndata
        ((2, 3), True)
    """
    f = open_file(source)
    # Nodes read through the open file; it stays open as long as they do (closed with the reader).
    return _group(f)


def _group(group: LazyNode) -> Group:
    out = Group()
    for name, child in group.children():
        out[str(name)] = _node(child)
    return out


def _node(node: LazyNode) -> Any:
    kind = node.kind
    if kind == "group":
        return _group(node)
    if kind == "array" and node.dtype is not None and node.dtype != np.dtype(object):
        return node
    if kind == "namedtuple":
        return NamedTuple((str(seg), _node(child)) for seg, child in node.children())
    if kind == "tuple":
        return tuple(_node(child) for _, child in node.children())
    return node.read()


def fetch(array: Any) -> np.ndarray:
    """The data of one array leaf: a lazy node is read into memory of its own; arrays pass."""
    if is_node(array):
        return np.asarray(array.read(mmap=False))
    return np.asarray(array)
