"""Flat tensor names in PyTorch's ``state_dict`` convention, from tree paths.

A tree path (``inspect`` convention: top-level name, field names, 1-based positions) becomes the
dotted name PyTorch gives the same parameter: positions count from 0 as in ``nn.ModuleList`` /
``nn.Sequential``, so ``model_state.layers[1].weight`` is ``layers.0.weight``. When a file has a
single top-level name (``model_state``), that name is left out, as a ``state_dict`` has no root
name; with several, it is the first part (``ps.layer_1.weight``, ``st.layer_1.…``).

Names are labels only: the tree metadata maps every tensor back to its exact path, so a field
name that contains a dot, or two paths that flatten to the same text, cannot lose anything; the
second of two equal names gets a ``#2`` suffix.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._errors import PathSegment


def flat_name(path: Sequence[PathSegment], *, drop_root: bool) -> str:
    """The dotted name of a tree path.

    Example:
        >>> flat_name(("model_state", "layers", 1, "weight"), drop_root=True)
        'layers.0.weight'
        >>> flat_name(("ps", "layer_1", "weight"), drop_root=False)
        'ps.layer_1.weight'
    """
    parts = list(path[1:] if drop_root else path)
    text = ".".join(str(p - 1) if isinstance(p, int) else str(p) for p in parts)
    return text or str(path[0] if path else "value")


class NameTable:
    """Hands out unique flat names (``#2``, ``#3``… for repeats).

    A name is also kept from being a dotted prefix of another (``a`` and ``a.b``), so the names
    can be the keys of nested dicts split at the dots (orbax keeps them that way).

    Example:
        >>> names = NameTable(drop_root=True)
        >>> names.add(("m", "a.b")), names.add(("m", "a", "b")), names.add(("m", "a"))
        ('a.b', 'a.b#2', 'a#2')
    """

    def __init__(self, *, drop_root: bool) -> None:
        self.drop_root = drop_root
        self._used: set[str] = set()
        self._prefixes: set[str] = set()

    def add(self, path: Sequence[PathSegment]) -> str:
        base = flat_name(path, drop_root=self.drop_root)
        name, n = base, 1
        while not self._free(name):
            n += 1
            name = f"{base}#{n}"
        self._used.add(name)
        parts = name.split(".")
        self._prefixes.update(".".join(parts[:i]) for i in range(1, len(parts)))
        return name

    def _free(self, name: str) -> bool:
        if name in self._used or name in self._prefixes:
            return False
        parts = name.split(".")
        return not any(".".join(parts[:i]) in self._used for i in range(1, len(parts)))
