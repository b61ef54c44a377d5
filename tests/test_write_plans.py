"""The writer's per-file plans change no byte of what it writes.

The writer remembers, per file, what it decided for one value so that the next alike values skip
the dataset machinery: header messages, the header of a small array of one dtype and shape
(``_small_heads``, ``_ref_plans``), the header of a compact scalar of one type
(``_compact_plans``), the Julia type of a layer (the TypeFactory's). Each is kept while fewer than
``_MESSAGES_KEPT`` are; with that bound at 0 (and the compact template replaced by the general
``_write_object`` it stands for) every value takes the general path. Files written both ways must
be identical, byte for byte: here for a model-like state, a Dict tree, and values whose writing
depends on the session they are written in (a ``UnionAll`` is written once in the datatype
session as an element type, then as a value in the file's session:
a plan made for the first must not be used for the second)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_write_jld2_rules import _where_vector_file

import treexchange as tx
from treexchange import JuliaDict, NamedTuple
from treexchange._jld2 import _writer
from treexchange._jld2._writer import JLD2Writer


def _general_compact(
    self: JLD2Writer, plan: tuple[Any, ...], value: Any, ws: dict[Any, int], tk: Any, path: tuple[Any, ...]
) -> int:
    """What ``_write_compact`` stands for: the general ``_write_object`` of a scalar dataset."""
    jt, datasz = plan[0], plan[3]
    data = _writer._Data.of_encoder(datasz, lambda: self.encode_value(jt.writeas, value, ws, path))
    return self._write_object(_writer._SCALAR, self.h5type(jt), data, ws, tk, path)


def _write(items: dict[str, object], *, plans: bool, monkeypatch: pytest.MonkeyPatch) -> bytes:
    with monkeypatch.context() as m:
        if not plans:
            m.setattr(_writer, "_MESSAGES_KEPT", 0)
            m.setattr(JLD2Writer, "_write_compact", _general_compact)
        buf = io.BytesIO()
        writer = JLD2Writer(buf)
        writer.prepare(list(items.items()))
        for name, value in items.items():
            writer.write(name, value)
        writer.close()
        return buf.getvalue()


def _model_state() -> NamedTuple:
    rng = np.random.default_rng(0)
    layers = tuple(
        NamedTuple(weight=rng.standard_normal((8, 4), dtype=np.float32), bias=np.zeros(8, np.float32))
        for _ in range(20)
    )
    return NamedTuple(layers=layers, σ=(), step=np.int64(3))


def _dict_tree() -> JuliaDict:
    rng = np.random.default_rng(1)
    tree = JuliaDict()
    for i in range(30):
        inner = tree.setdefault(f"g{i % 3}", JuliaDict())
        inner[f"w{i}"] = rng.standard_normal(16).astype(np.float64)
        inner[f"n{i}"] = np.int64(i)
    tree["shared"] = tree["g0"]["w0"]  # one array referenced twice: one dataset
    return tree


@pytest.mark.parametrize("make", [_model_state, _dict_tree], ids=["namedtuple", "dict"])
def test_plans_change_no_byte(make: object, monkeypatch: pytest.MonkeyPatch) -> None:
    value = make()  # type: ignore[operator]
    with_plans = _write({"st": value}, plans=True, monkeypatch=monkeypatch)
    without = _write({"st": value}, plans=False, monkeypatch=monkeypatch)
    assert with_plans == without


def test_a_unionall_planned_in_the_datatype_session_is_not_reused_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "where.jld2"
    path.write_bytes(_where_vector_file())
    v = tx.load(path)["v"]
    unionall = v.eltype.params[0]  # Foo{T} where T: written as v's element type first
    items = {"v": v, "u": unionall, "w": JuliaDict({"u": unionall})}
    with_plans = _write(items, plans=True, monkeypatch=monkeypatch)
    without = _write(items, plans=False, monkeypatch=monkeypatch)
    assert with_plans == without
    out = tmp_path / "out.jld2"
    out.write_bytes(with_plans)
    back = tx.load(out)
    assert tx.values_equal(back["u"], unionall)
