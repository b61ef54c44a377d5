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

from .._errors import UnsupportedError
from .._jld2._nodes import Node
from .._jld2._reader import Session
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
    return _Walk().group(f)


class _Walk:
    """One walk over a file: every value it reads goes through one JLD2 read session, so an object
    the file holds once (a dataset referenced from two places: an optimiser's ``IdDict`` keyed
    by the model's own arrays, a struct two roots share) is one Python object however many roots
    and paths reach it, and an array left lazy is the same node wherever it is met (the writers
    keep that sharing: :class:`._treejson.Sharing`)."""

    def __init__(self) -> None:
        self.session: Session | None = None
        # HDF5 groups by address: one a second link names is the same Group (a same node in the
        # tree formats, not a copy per link: a DAG of groups 40 deep is 2**40 places); None
        # while its links are walked (a link back to it is a cycle, refused)
        self.groups: dict[int, Group | None] = {}

    def group(self, group: LazyNode) -> Group:
        address = group.object_address
        if address is not None and address in self.groups:
            met = self.groups[address]
            if met is None:
                raise UnsupportedError(
                    "a hard link cycle: this group contains itself; convert cannot write it", path=group.path
                )
            return met
        if address is not None:
            self.groups[address] = None
        out = Group()
        for name, child in group.children():
            out[str(name)] = self.node(child)
        if address is not None:
            self.groups[address] = out
        return out

    def node(self, node: LazyNode) -> Any:
        kind = node.kind
        if kind == "group":
            return self.group(node)
        if kind == "namedtuple" or kind == "tuple":
            return self.immutable(node, kind)
        lazy = kind == "array" and node.dtype is not None and node.dtype != np.dtype(object)
        if not isinstance(node, Node):  # (a BSON file's node: its own read, identity within it)
            return node if lazy else node.read()
        session = self._session(node)
        address = node.object_address
        if address is not None and address in session.memo:
            return session.memo[address]  # (read or met before: the same object)
        if lazy:
            if address is not None:
                session.memo[address] = node  # (a struct referring to it later holds this node)
            return node
        return node._read(session)

    def _session(self, node: Node) -> Session:
        if self.session is None:
            self.session = Session(node._reader)
        return self.session

    def immutable(self, node: LazyNode, kind: str) -> Any:
        """A NamedTuple or tuple, its children walked. One that is a dataset of its own (a
        reference names it: a field declared ``Any``) is walked once and is that same value at
        every place, where what it expands to counts against ``Limits.max_nodes``, as when the
        session reads it (a file placing it again and again is refused, not expanded)."""
        address = node.object_address if isinstance(node, Node) else None
        session = self._session(node) if isinstance(node, Node) and address is not None else None
        if session is not None and address is not None:
            if address in session.memo:
                value = session.memo[address]
                session.expansion.again(value, node.path, session.reader.h5.absolute(address))
                return value
        children = ((str(seg), self.node(child)) for seg, child in node.children())
        value = NamedTuple(children) if kind == "namedtuple" else tuple(v for _, v in children)
        if session is not None and address is not None:
            session.memo[address] = value
        return value


def fetch(array: Any) -> np.ndarray:
    """The data of one array leaf: a lazy node is read into memory of its own; arrays pass."""
    if is_node(array):
        return np.asarray(array.read(mmap=False))
    return np.asarray(array)
