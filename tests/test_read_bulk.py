"""Reading many alike datasets at once gives what reading them one by one gives.

A vector of many references (a Dict's pairs, a long tuple of layers) is read ahead in bulk
(``Session.prefetch``): headers alike but for their data address are matched with numpy, plain
arrays become views of the map without a header object each, and small scalar datasets (Pairs,
NamedTuples of references) are decoded from bytes read at once. These tests hold that path to
the usual one: same values, same sharing of arrays, same mutability flags, same errors (hostile
files, and a corrupted array among many), with bulk reading forced everywhere or turned off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import HOSTILE as HOSTILE_DIR, all_fixtures_or_skip, fixture_files, fixture_ids

import treexchange as tx
from treexchange import JuliaDict, NamedTuple, TreexchangeError, values_equal
from treexchange._jld2 import _reader

FIXTURES = all_fixtures_or_skip("**/*.jld2")  # JLD v1 (.jld) files do not load
IDS = fixture_ids([p for p in fixture_files() if p.suffix != ".jld"]) or None
HOSTILE = sorted(HOSTILE_DIR.glob("*.jld2"))


def _outcome(path: Path, bulk: bool, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> Any:
    """``load(path)`` with bulk reading forced (every vector of references) or off."""
    monkeypatch.setattr(_reader, "_PREFETCH_MIN", 1 if bulk else 1 << 62)
    try:
        return tx.load(path, **kw)
    except TreexchangeError as err:
        return (type(err), str(err))
    finally:
        monkeypatch.undo()


def _sharing(value: Any) -> list[int]:
    """For each container or array met in a walk of ``value`` (in order), the position of its
    first appearance: equal lists mean the same objects are shared in the same places."""
    first: dict[int, int] = {}
    out: list[int] = []
    stack = [value]
    steps = 0
    while stack and steps < 100_000:  # (hostile files hold tuples of millions of ghosts)
        steps += 1
        v = stack.pop()
        if isinstance(v, (np.ndarray, dict, list, tuple, NamedTuple, tx.JuliaStruct, tx.JuliaArray)):
            out.append(first.setdefault(id(v), len(first)))
            if first[id(v)] != len(first) - 1:
                continue  # seen before: its contents too
        if isinstance(v, np.ndarray) and v.dtype == object:
            stack.extend(v.ravel(order="F").tolist())
        elif isinstance(v, (dict, NamedTuple)):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, tx.JuliaArray):
            stack.append(v.data)
        elif isinstance(v, tx.JuliaStruct):
            out.append(int(v.mutable))
            stack.extend(v.fields.values())
    return out


def _same(a: Any, b: Any) -> None:
    if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], type):
        assert a == b  # the same error
        return
    assert values_equal(a, b)
    assert _sharing(a) == _sharing(b)


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_bulk_reading_agrees_on_fixtures(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _same(_outcome(path, True, monkeypatch), _outcome(path, False, monkeypatch))
    _same(
        _outcome(path, True, monkeypatch, order="storage"),
        _outcome(path, False, monkeypatch, order="storage"),
    )


@pytest.mark.parametrize("path", HOSTILE, ids=[p.name for p in HOSTILE] or None)
def test_bulk_reading_agrees_on_hostile_files(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _same(_outcome(path, True, monkeypatch), _outcome(path, False, monkeypatch))


def _dict_state(n: int) -> JuliaDict:
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(16).astype(np.float32) for _ in range(n)]
    state = JuliaDict((f"k{i}", a) for i, a in enumerate(arrays))
    state["again"] = arrays[3]  # one array under two keys: one dataset, read as one object
    state["matrix"] = rng.standard_normal((3, 4)).astype(np.float32)
    state["other"] = np.arange(5, dtype=np.int64)
    return state


def test_bulk_reading_of_a_large_dict_and_tuple(tmp_path: Path) -> None:
    """Real prefetch sizes (no forcing): a Dict of 300 arrays and a tuple of 200 layers."""
    path = tmp_path / "big.jld2"
    rng = np.random.default_rng(1)
    layers = tuple(
        NamedTuple(weight=rng.standard_normal((4, 3)).astype(np.float32), bias=np.full(4, i, np.float32))
        for i in range(200)
    )
    tx.save(path, d=_dict_state(300), m=NamedTuple(layers=layers))
    back = tx.load(path)
    assert values_equal(back["d"], _dict_state(300))
    assert back["d"]["again"] is back["d"]["k3"]
    for got, want in zip(back["m"]["layers"], layers):
        np.testing.assert_array_equal(got["weight"], want["weight"])
        assert got["weight"].flags.f_contiguous and got["weight"].shape == (4, 3)
    storage = tx.load(path, order="storage")
    np.testing.assert_array_equal(storage["m"]["layers"][5]["weight"], layers[5]["weight"].T)


def _corrupt_one_array(tmp_path: Path) -> Path:
    """A Dict of 100 arrays whose 50th array's data address points past the end of the file."""
    path = tmp_path / "bad.jld2"
    tx.save(path, d=JuliaDict((f"k{i}", np.full(8, i, np.float32)) for i in range(100)))
    raw = bytearray(path.read_bytes())
    with tx.open(path) as f:
        node = f["d"]["k50"]
        info = node._info
        assert info is not None
        layout = info.find(8)
        assert layout is not None
    raw[layout.offset + 2 : layout.offset + 10] = (len(raw)).to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    return path


def test_bulk_reading_keeps_the_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _corrupt_one_array(tmp_path)
    bulk, plain = _outcome(path, True, monkeypatch), _outcome(path, False, monkeypatch)
    assert bulk == plain and bulk[0] is tx.FormatError
    assert "d.kvvec[51].second" in bulk[1]


def test_bulk_reading_respects_max_objects(tmp_path: Path) -> None:
    path = tmp_path / "many.jld2"
    tx.save(path, d=JuliaDict((f"k{i}", np.zeros(2, np.float32)) for i in range(200)))
    with pytest.raises(tx.LimitError, match="max_objects"):
        tx.load(path, limits=tx.Limits(max_objects=150))


def _records(path: Path, bulk: bool, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every node of a lazy walk as ``inspect --json`` lists it (arrays hashed: their data read
    through the dataset's own header), with bulk checks on (forced) or off."""
    from treexchange._inspect import node_record, walk_nodes
    from treexchange._jld2 import _nodes

    monkeypatch.setattr(_nodes, "_BULK_MIN", 1 if bulk else 1 << 62)
    try:
        with tx.open(path) as f:
            return [(node.path, node_record(node)) for node, _ in walk_nodes(f) if hasattr(node, "kind")]
    except TreexchangeError as err:
        return [(type(err), str(err))]
    finally:
        monkeypatch.undo()


def test_bulk_walk_agrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lazy walk that checks the headers of a vector's elements in bulk (``Reader.prime``)
    shows what one that parses each shows: a tuple of layers, Dicts of arrays and of Dicts."""
    path = tmp_path / "walk.jld2"
    rng = np.random.default_rng(2)
    weights = rng.standard_normal((60, 2, 3)).astype(np.float32)
    layers = tuple(NamedTuple(weight=w, bias=np.full(2, i, np.float32), s=()) for i, w in enumerate(weights))
    inner = [JuliaDict((f"k{i}", np.full(3, i + j)) for i in range(40)) for j in range(3)]
    nested = JuliaDict((f"g{j}", d) for j, d in enumerate(inner))
    tx.save(path, m=NamedTuple(layers=layers), d=_dict_state(50), n=nested)
    assert _records(path, True, monkeypatch) == _records(path, False, monkeypatch)


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_bulk_walk_agrees_on_fixtures(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _records(path, True, monkeypatch) == _records(path, False, monkeypatch)


def test_bulk_walk_keeps_the_checks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _corrupt_one_array(tmp_path)
    bulk, plain = _records(path, True, monkeypatch), _records(path, False, monkeypatch)
    assert bulk == plain and bulk[0][0] is tx.FormatError
