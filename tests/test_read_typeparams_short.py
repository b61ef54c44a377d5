"""Type parameters read the short way (TypeResolver._scalar_param, _committed_param) are exactly
what the general way gives: a parameter dataset read as a value in a session of its own, and a
committed type's full plan. Checked on every real file in ../shared, after a lazy walk (what the
short ways serve) and a full load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import all_fixtures_or_skip, fixture_ids, require_fixture

import treexchange as tx
from treexchange._jld2._plans import type_of_value
from treexchange._jld2._typesread import TypeResolver

FILES = all_fixtures_or_skip("**/*.jld2")


def _walk(node: Any, budget: list[int]) -> None:
    """Visit up to ``budget[0]`` nodes below ``node`` (their metadata only)."""
    if budget[0] <= 0 or not hasattr(node, "keys"):
        return
    for key in node.keys():
        budget[0] -= 1
        if budget[0] <= 0:
            return
        _walk(node[key], budget)


@pytest.mark.parametrize("path", FILES, ids=fixture_ids([p for p in FILES if isinstance(p, Path)]))
def test_short_type_parameters_match_the_general_read(path: Path) -> None:
    with tx.open(path) as f:
        try:
            _walk(f, [3000])
        except tx.TreexchangeError:
            pytest.skip("the walk stops at an error (the file's own tests say which)")
        reader = f.reader
        types = reader.types
        for ref, value in list(types._params.items()):
            if types.is_committed_datatype(ref):
                assert types.committed(ref).julia_type == value, ref
            else:
                assert type_of_value(reader.load_standalone(ref, ())) == value, ref
        for address, jt in list(types.committed_types.items()):
            assert types.committed(address).julia_type == jt, address


def test_a_walk_plans_only_the_committed_types_it_meets() -> None:
    """A Flux state's NamedTuple type names each layer's NamedTuple type as a parameter: opening
    the state decodes those names, and plans a layer's type only once a layer is looked at."""
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    with tx.open(path) as f:
        state = f["lenet_state"]
        types = f.reader.types
        named_only = set(types.committed_types) - set(types._committed)
        assert named_only  # layer types known by name, not planned
        conv = state["layers"][0]
        assert conv.kind == "namedtuple" and conv["weight"].shape == (5, 5, 1, 6)
        for address in named_only:
            assert types.committed(address).julia_type == types.committed_types[address]


def _nested_dicts(path: Path) -> None:
    inner = [tx.JuliaDict({f"l{j}": np.full(3, j, np.float32) for j in range(2)}) for _ in range(3)]
    tx.save(path, st=tx.JuliaDict({f"g{i}": d for i, d in enumerate(inner)}))


def _types_read(path: Path) -> tuple[Any, ...]:
    with tx.open(path) as f:
        _walk(f, [3000])
        types = f.reader.types
        return (
            {ref: repr(v) for ref, v in types._params.items()},
            {a: repr(t) for a, t in types.committed_types.items()},
            sorted(types.writer_traits),
            sorted(map(repr, types.by_name_params)),
        )


def _compact_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, Any]]:
    """(address, form) of each read by TypeResolver._compact_element (the shortcut)."""
    got: list[tuple[int, Any]] = []
    read = TypeResolver._compact_element

    def counted(self: TypeResolver, address: int, form: Any) -> bytes | None:
        raw = read(self, address, form)
        if raw is not None:
            got.append((address, form))
        return raw

    monkeypatch.setattr(TypeResolver, "_compact_element", counted)
    return got


def test_compact_parameter_shortcut_reads_what_the_general_way_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JLD2 writes each committed type's parameters afresh as scalar DataType (and Int64)
    datasets of one header form: all but the first are read from their compact layout directly
    (TypeResolver._compact_element). Types, committed types, writer traits and by-name
    parameters are those of the general way (element_bytes_at), the shortcut turned off."""
    path = tmp_path / "nested.jld2"
    _nested_dicts(path)
    shortcut = _compact_reads(monkeypatch)
    fast = _types_read(path)
    assert len(shortcut) >= 5  # (each inner Dict's and Pair's String, Array, Float32, N...)
    monkeypatch.setattr(TypeResolver, "_note_scalar_form", lambda self, info: None)
    shortcut.clear()
    assert _types_read(path) == fast
    assert shortcut == []


@pytest.mark.parametrize("damage", ["stored", "class"])
def test_compact_parameter_shortcut_keeps_the_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    """A parameter dataset whose compact layout is damaged (stored size past its message, or
    another layout class) is left to the general way: the same error, at the same offset, as
    with the shortcut turned off."""
    path = tmp_path / "nested.jld2"
    _nested_dicts(path)
    shortcut = _compact_reads(monkeypatch)
    with tx.open(path) as f:
        _walk(f, [3000])
        base = f.reader.h5.base
    address, form = shortcut[len(shortcut) // 2]
    at = address + base + form[1]  # a layout body the shortcut read
    data = bytearray(path.read_bytes())
    if damage == "stored":
        data[at + 2 : at + 4] = (form[2] - 3).to_bytes(2, "little")  # past the message's end
    else:
        data[at + 1] = 1  # contiguous, with a compact layout's bytes
    path.write_bytes(bytes(data))

    def outcome() -> tuple[str, str, int | None]:
        try:
            _types_read(path)
        except tx.TreexchangeError as err:
            return type(err).__name__, str(err), err.offset
        return "read", "", None

    shortcut.clear()
    with_shortcut = outcome()
    assert shortcut  # (it read the others)
    monkeypatch.setattr(TypeResolver, "_note_scalar_form", lambda self, info: None)
    assert outcome() == with_shortcut
