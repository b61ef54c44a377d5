"""Julia's ``Symbol``: a value (``:relu`` in a struct field) and a part of type text (the names
``(:weight, :bias)`` of a ``NamedTuple`` type), so both the type AST (:mod:`._juliatype`) and the
value model (:mod:`._values`, which re-exports it) import it from here.
"""

from __future__ import annotations


class Symbol(str):
    """A Julia ``Symbol`` (a ``str`` that remembers it was a Symbol).

    Example:
        >>> from treexchange import Symbol
        >>> s = Symbol("relu")
        >>> s == "relu", s.julia_repr()
        (True, ':relu')
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Symbol({str.__repr__(self)})"

    def julia_repr(self) -> str:
        """How Julia writes this Symbol as a literal."""
        text = str(self)
        if text.isidentifier() or (
            text and all(c.isalnum() or c in "_!²₀₁₂³⁴" for c in text) and not text[0].isdigit()
        ):
            return f":{text}"
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        return f'Symbol("{escaped}")'
