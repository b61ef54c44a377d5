"""A JLD2 file as a value tree whose big arrays are not read yet.

Converters walk the file's lazy nodes: NamedTuples, tuples and groups (the containers of a
``Flux.state`` or a Lux ``ps``) are rebuilt from their children, numeric arrays stay
:class:`treexchange.Node` objects (shape and dtype known, nothing read), every other value is read
whole (structs, dicts, strings... are small). :func:`fetch` then reads one array into memory of its
own (one ``pread``, no memory map), so a converter holds one array at a time.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .._jld2._nodes import ArrayNode, Group as NodeGroup, Node
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
    import treexchange

    f = treexchange.open(source)
    # Nodes read through the open file; it stays open as long as they do (closed with the reader).
    return _group(f)


def _group(group: Any) -> Group:
    out = Group()
    for name in group:
        child = group[name]
        out[name] = _group(child) if isinstance(child, NodeGroup) else _node(child)
    return out


def _node(node: Node | NodeGroup) -> Any:
    if isinstance(node, NodeGroup):
        return _group(node)
    if isinstance(node, ArrayNode) and node.kind == "array" and node.dtype != np.dtype(object):
        return node
    if node.kind == "namedtuple":
        import treexchange

        return treexchange.NamedTuple((str(k), _node(node[k])) for k in node.keys())  # type: ignore[attr-defined]
    if node.kind == "tuple":
        return tuple(_node(child) for _, child in node.children())
    return node.read()


def fetch(array: Any) -> np.ndarray:
    """The data of one array leaf: a lazy node is read into memory of its own; arrays pass."""
    if isinstance(array, ArrayNode):
        value = array.read(mmap=False)
        return np.asarray(value)
    return np.asarray(array)
