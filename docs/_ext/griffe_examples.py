"""Griffe extension for the documentation site: render ``Example:`` sections as examples.

The package's docstrings are Google style and head their doctests ``Example:``; griffe's Google
parser knows only the plural ``Examples:`` as the section whose ``>>>`` lines become code blocks
(the singular would be rendered as an admonition of Markdown text, so doctest output such as
``[['a'], ...]`` would be read as Markdown links). Renaming the heading while the docs are built
keeps the sources as they are.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_SINGULAR = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(Extension):
    """Rewrites a docstring's ``Example:`` heading to ``Examples:`` before it is parsed."""

    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _SINGULAR.sub(r"\1Examples:", obj.docstring.value)
