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


def _compact(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(", ", ": "))


def _emit(data: Any, level: int, indent: int, width: int, out: list[str], *, prefix_len: int) -> None:
    if not isinstance(data, (dict, list)) or not data:
        out.append(_compact(data))
        return
    text = _compact(data)
    if level * indent + prefix_len + len(text) <= width:
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
