"""Writing one value with the writer's bulk paths on and off (tests/test_write_bulk.py,
tests/test_write_dicts_bulk.py): the bulk paths must change no byte."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

import treexchange as tx
from treexchange._jld2 import _writer, _writer_bulk
from treexchange._jld2._writer import JLD2Writer


def write_bytes(value: Any, *, bulk: bool, plans: bool = True, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """The bytes of a file holding ``value`` as ``st``, written in memory with the bulk paths on
    or off (``plans=False``: no header-message plans kept either)."""
    with monkeypatch.context() as m:
        m.setattr(_writer_bulk, "enabled", bulk)
        if not plans:
            m.setattr(_writer, "_MESSAGES_KEPT", 0)
        buf = io.BytesIO()
        writer = JLD2Writer(buf)
        writer.prepare([("st", value)])
        writer.write("st", value)
        writer.close()
        return buf.getvalue()


def saved_both_ways(value: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """``tx.save`` of ``value`` as ``st`` with the bulk paths on, then off: the two files."""
    paths = []
    for bulk in (True, False):
        monkeypatch.setattr(_writer_bulk, "enabled", bulk)
        path = tmp_path / f"{bulk}.jld2"
        tx.save(path, st=value)
        paths.append(path)
    return paths
