"""A closure's lowered code, as BSON.jl stores it, written back as one line of Julia text.

BSON.jl keeps an anonymous function's method with its ``Core.CodeInfo`` uncompressed: statements
such as ``Expr(:call, GlobalRef(Main, :size), SlotNumber(2), 4)``, ``SSAValue`` references to
earlier statements and a ``return``. For the straight-line closures of old Flux models
(``x -> reshape(x, :, size(x, 4))``, ``x -> relu.(x)``) each statement's value is used once,
so the code folds back into the expression that was written. That text is shown (``inspect``)
and matched against the spellings of known functions (``_port._arch.known_closure``); it is never
evaluated. Anything else (branches, a value used twice, a captured variable, a literal other than
a number) gives ``None``: the closure stays code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from .._errors import TreexchangeError
from ._container import Doc, Seq

_BROADCAST = re.compile(r"[^\W\d][\w!]*\.\(")  # (what a `broadcasted` call is written back as)
_MAX_STATEMENTS = 32  # (the closures this is for have two or three; more is not a spelling)
_MAX_TEXT = 200


def lowered_text(method_fields: Seq, deref: Callable[[Any], Any]) -> str | None:
    """``"x -> reshape(x, :, size(x, 4))"`` for a method whose CodeInfo folds into one
    expression of its one argument, else ``None`` (never raises on what the file holds)."""
    try:
        return _Folder(deref).method(method_fields)
    except (_NotSimple, TreexchangeError):  # (a damaged reference inside the code: no text either)
        return None


class _NotSimple(Exception):
    """The code is no single expression of known parts."""


class _Folder:
    def __init__(self, deref: Callable[[Any], Any]) -> None:
        self.deref = deref
        self.statements: list[Any] = []
        self.used: set[int] = set()
        self.slots: list[str] = []

    def method(self, fields: Seq) -> str:
        found = [d for d in map(self.deref, fields) if _struct_named(d, self.deref, "CodeInfo")]
        if len(found) != 1:
            raise _NotSimple
        code_info = found[0]
        data = code_info.get("data")
        if not isinstance(data, Seq) or not data:
            raise _NotSimple
        code = self.deref(data[0])
        if not isinstance(code, Seq) or not 1 <= len(code) <= _MAX_STATEMENTS:
            raise _NotSimple
        self.slots = self._slot_names(data)
        if len(self.slots) != 2:  # (#self# and the one argument)
            raise _NotSimple
        self.statements = [self.deref(s) for s in code]
        last = self.statements[-1]
        value = self._returned(last)
        text = self.render(value)
        if len(self.used) != len(self.statements) - 1:  # (every statement but the return, once)
            raise _NotSimple
        text = f"{self.slots[1]} -> {text}"
        if len(text) > _MAX_TEXT:
            raise _NotSimple
        return text

    def _slot_names(self, code_info: Seq) -> list[str]:
        """The CodeInfo's ``slotnames`` (a vector of symbols beginning with ``#self#``)."""
        for field in code_info[1:]:
            names = self.deref(field)
            if isinstance(names, Seq) and names:
                texts = [_symbol(self.deref(n)) for n in names]
                if texts[0] == "#self#" and all(texts):
                    return [str(t) for t in texts]
        raise _NotSimple

    def _returned(self, statement: Any) -> Any:
        if _struct_named(statement, self.deref, "ReturnNode"):  # (Julia ≥ 1.6)
            data = statement.get("data")
            if isinstance(data, Seq) and len(data) == 1:
                return data[0]
        head, args = self._expr(statement)
        if head == "return" and len(args) == 1:
            return args[0]
        raise _NotSimple

    def _expr(self, value: Any) -> tuple[str, Seq]:
        if not _struct_named(value, self.deref, "Expr"):
            raise _NotSimple
        data = value.get("data")
        if not isinstance(data, Seq) or len(data) != 2:
            raise _NotSimple
        head, args = _symbol(self.deref(data[0])), self.deref(data[1])
        if head is None or not isinstance(args, Seq):
            raise _NotSimple
        return head, args

    def render(self, raw: Any, depth: int = 0) -> str:
        if depth > 16:
            raise _NotSimple
        value = self.deref(raw)
        if isinstance(value, (bool, np.bool_)):
            raise _NotSimple
        if isinstance(value, (int, np.integer)):
            return str(int(value))
        if isinstance(value, (float, np.floating)):
            return repr(float(value))
        for name in ("SlotNumber", "SSAValue", "GlobalRef"):
            if _struct_named(value, self.deref, name):
                data = value.get("data")
                if not isinstance(data, Seq):
                    raise _NotSimple
                return getattr(self, "_" + name.lower())(data, depth)
        head, args = self._expr(value)
        if head != "call" or not args:
            raise _NotSimple
        parts = [self.render(a, depth + 1) for a in args]
        # `f.(g.(x))` lowers to materialize(broadcasted(f, broadcasted(g, x))): written back as
        # the dot calls (materialize only ever wraps the outermost broadcasted)
        if parts[0] == "broadcasted" and len(parts) >= 3:
            return f"{parts[1]}.({', '.join(parts[2:])})"
        if parts[0] == "materialize":
            if len(parts) != 2 or not _BROADCAST.match(parts[1]):
                raise _NotSimple
            return parts[1]
        return f"{parts[0]}({', '.join(parts[1:])})"

    def _slotnumber(self, data: Seq, depth: int) -> str:
        n = self.deref(data[0]) if data else None
        if not isinstance(n, (int, np.integer)) or n != 2:  # (the argument; #self# is a capture)
            raise _NotSimple
        return self.slots[1]

    def _ssavalue(self, data: Seq, depth: int) -> str:
        k = self.deref(data[0]) if data else None
        if not isinstance(k, (int, np.integer)) or not 1 <= k < len(self.statements) or k in self.used:
            raise _NotSimple
        self.used.add(int(k))
        return self.render(self.statements[int(k) - 1], depth + 1)

    def _globalref(self, data: Seq, depth: int) -> str:
        name = _symbol(self.deref(data[1])) if len(data) == 2 else None
        if name is None:
            raise _NotSimple
        return name


def _symbol(raw: Any) -> str | None:
    if isinstance(raw, Doc) and raw.get("tag") == "symbol" and isinstance(raw.get("name"), str):
        return str(raw["name"])
    return None


def _struct_named(value: Any, deref: Callable[[Any], Any], name: str) -> bool:
    """Whether ``value`` is a BSON.jl struct of ``Core.<name>``."""
    if not isinstance(value, Doc) or value.get("tag") != "struct":
        return False
    t = deref(value.get("type"))
    path = t.get("name") if isinstance(t, Doc) else None
    return isinstance(path, Seq) and len(path) >= 2 and path[-1] == name and path[-2] == "Core"
