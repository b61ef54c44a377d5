"""How far a loaded tree expands where it places one immutable value many times.

A file may store a value once and refer to it from several places: a BSON.jl backref, a JLD2
reference read twice, a ``same`` node of treexchange's tree metadata. The readers give the very
same Python object at each place, so loading stays linear in the file. What walks the tree
afterwards visits it once per place: writing JLD2 (an immutable value is written again at
every place, as JLD2.jl does, and its Julia type spells out every part), encoding tree metadata,
inferring a schema, porting. A tuple holding the same tuple twice, forty levels deep, is then
2**40 nodes from a file of a few kilobytes, and ``convert`` never ends.

A mutable value (an array, a ``Vector{Any}``, a Dict, a mutable struct) is written once and
referred to after, so placing it again costs one node; an immutable one (a tuple, a NamedTuple,
an immutable struct, a closure's captures) costs its whole expansion at each place.
:class:`Expansion` adds those costs up as a reader hands a value out again, and refuses the file
(:class:`treexchange.LimitError`) past ``Limits.max_nodes`` (by default ``max(10**6, 64 * file
size)``, the bound a listing or schema walk of the file has), before anything walks it.
"""

from __future__ import annotations

from typing import Any

from ._errors import LimitError, TreePath
from ._values import Closure, JuliaStruct, NamedTuple


def _parts(value: Any) -> tuple[Any, ...] | None:
    """The parts of an immutable container (placed again with it), or None for anything placed
    again as one node: a leaf, or a mutable value (written once, then referred to)."""
    kind = type(value)
    if kind is tuple:
        return value  # type: ignore[no-any-return]
    if kind is NamedTuple:
        return tuple(value._data.values())
    if kind is JuliaStruct:
        return None if value.mutable else tuple(value.fields.values())
    if kind is Closure:
        return tuple(value.captures)
    return None


class Expansion:
    """The nodes one file's values expand to where shared immutable values are placed again.

    Args:
        limit: most nodes those repeats may add (``Limits.nodes_for(file size)``).
        where: what the error names (the file).

    Example:
        >>> from treexchange import LimitError
        >>> from treexchange._expansion import Expansion
        >>> inner = ((1, 2), (3, 4))
        >>> budget = Expansion(10, "f.bson")
        >>> budget.again(inner, ("a",))  # placed again: 7 nodes
        >>> budget.total
        7
        >>> try:
        ...     budget.again(inner, ("b",))
        ... except LimitError as err:
        ...     print(err.path, "more than 10 nodes" in str(err))
        ('b',) True
    """

    def __init__(self, limit: int, where: str = "") -> None:
        self.limit = limit
        self.where = where
        self.total = 0
        self._sizes: dict[int, tuple[Any, int]] = {}  # id -> (the value, kept alive; its size)

    def again(self, value: Any, path: TreePath, offset: int | None = None) -> None:
        """Count ``value``, read before, placed again at ``path``."""
        if _parts(value) is None:
            return
        self.total += self.size(value)
        if self.total > self.limit:
            prefix = f"{self.where}: " if self.where else ""
            raise LimitError(
                f"{prefix}the values this file shares expand to more than {self.limit} nodes at the "
                "places that hold them (an immutable value shared many times over?; Limits.max_nodes)",
                path=path,
                offset=offset,
            )

    def size(self, value: Any) -> int:
        """The nodes ``value`` expands to at one place (each distinct object sized once)."""
        sizes = self._sizes
        open_: set[int] = set()  # (being sized: met again inside itself, it counts one node)
        todo: list[tuple[Any, bool]] = [(value, False)]
        while todo:
            v, ready = todo.pop()
            if id(v) in sizes or (not ready and id(v) in open_):
                continue
            parts = _parts(v)
            if parts is None:
                continue
            if ready:
                open_.discard(id(v))
                total = 1
                for p in parts:
                    known = sizes.get(id(p))
                    total += known[1] if known is not None else 1
                sizes[id(v)] = (v, total)
            else:
                open_.add(id(v))
                todo.append((v, True))
                todo.extend((p, False) for p in parts if id(p) not in sizes)
        known = sizes.get(id(value))
        return known[1] if known is not None else 1
