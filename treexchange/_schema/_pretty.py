"""Readable JSON for schema documents: nested structure indented, small pieces kept on one line.

``json.dumps(indent=2)`` puts every shape dimension on its own line; a schema is read by people
(reviews, diffs in version control), so a node that fits on one line stays on one line.
"""

from __future__ import annotations

import json
from typing import Any

_WIDTH = 100


def pretty_json(data: Any, *, indent: int = 2, width: int = _WIDTH) -> str:
    """JSON text of ``data``: values whose compact form fits within ``width`` (at their indentation)
    on one line, larger ones expanded.

    Example:
        >>> print(pretty_json({"kind": "array", "shape": [3, 4], "more": {"a": list(range(30))}}, width=40))
        {
          "kind": "array",
          "shape": [3, 4],
          "more": {
            "a": [
              0,
        ...
    """
    out: list[str] = []
    _emit(data, 0, indent, width, out, prefix_len=0)
    return "".join(out)


_ENCODE_STRING = json.encoder.encode_basestring  # type: ignore[attr-defined]  # C-accelerated


def _compact(data: Any) -> str:
    # Scalars are most of a schema: format them directly (json.dumps per value is slow).
    if isinstance(data, str):
        return _ENCODE_STRING(data)  # type: ignore[no-any-return]
    if data is None:
        return "null"
    if data is True:
        return "true"
    if data is False:
        return "false"
    if type(data) is int:
        return str(data)
    return json.dumps(data, ensure_ascii=False, separators=(", ", ": "))


def _short(data: Any, budget: int) -> str | None:
    """The one-line text of ``data`` if it is at most ``budget`` characters, else ``None``.

    Gives up as soon as the budget is spent, so checking a huge subtree costs O(budget), and
    deciding the layout of a whole document stays linear in its size.
    """
    if budget <= 0:
        return None
    if isinstance(data, dict):
        parts: list[str] = []
        used = 2
        for key, value in data.items():
            key_text = _compact(key)
            used += len(key_text) + 2 + (2 if parts else 0)
            text = _short(value, budget - used)
            if text is None:
                return None
            used += len(text)
            parts.append(f"{key_text}: {text}")
        return "{" + ", ".join(parts) + "}" if used <= budget else None
    if isinstance(data, list):
        items: list[str] = []
        used = 2
        for value in data:
            used += 2 if items else 0
            text = _short(value, budget - used)
            if text is None:
                return None
            used += len(text)
            items.append(text)
        return "[" + ", ".join(items) + "]" if used <= budget else None
    text = _compact(data)
    return text if len(text) <= budget else None


def _emit(data: Any, level: int, indent: int, width: int, out: list[str], *, prefix_len: int) -> None:
    if not isinstance(data, (dict, list)) or not data:
        out.append(_compact(data))
        return
    text = _short(data, width - level * indent - prefix_len)
    if text is not None:
        out.append(text)
        return
    pad = " " * ((level + 1) * indent)
    if isinstance(data, dict):
        out.append("{\n")
        for i, (key, value) in enumerate(data.items()):
            key_text = _compact(key) + ": "
            out.append(pad + key_text)
            _emit(value, level + 1, indent, width, out, prefix_len=len(key_text))
            out.append(",\n" if i < len(data) - 1 else "\n")
        out.append(" " * (level * indent) + "}")
    else:
        out.append("[\n")
        for i, value in enumerate(data):
            out.append(pad)
            _emit(value, level + 1, indent, width, out, prefix_len=0)
            out.append(",\n" if i < len(data) - 1 else "\n")
        out.append(" " * (level * indent) + "]")
