"""A lazy walk over a vector of struct references (a Flux state's ``layers``) makes the struct
children of a block of elements together (``RefVectorNode._make_block``), reads a NamedTuple's
reference fields by name through one lookup per type (``CompoundPlan.ref_at``), and describes an
array node by its header (or, for a value decoded in memory, by that value).

Checked against ``treexchange.load`` (the eager path, which shares none of this) for vectors that
mix structs of several types with arrays and values stored otherwise, asked in an order that
crosses block boundaries, and against what a node must keep: its path, its identity when asked
again, and the file's state (closed, nested too deep)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import treexchange as tx
from treexchange import NamedTuple

_N = 150  # more than two blocks of 64


def _mixed_layers() -> NamedTuple:
    """A ``Vector{Any}`` of structs of several types, arrays and numbers (each element a
    dataset of its own: a vector of references)."""
    rng = np.random.default_rng(3)
    layers: list[Any] = []
    for i in range(_N):
        w = rng.standard_normal((3, i % 4 + 1)).astype(np.float32)
        if i % 10 == 9:
            layers.append(w)  # an array among the structs
        elif i % 13 == 4:
            layers.append(float(i))  # a scalar dataset that is no struct
        elif i % 7 == 3:
            layers.append(NamedTuple(weight=w, bias=np.zeros(3), scale=1.5 + i, name=f"l{i}"))
        elif i % 11 == 5:
            layers.append((w, np.arange(i + 1)))  # a Tuple
        else:
            layers.append(NamedTuple(weight=w, bias=np.full(3, i, np.float64)))
    return NamedTuple(layers=layers, σ=())


def _flux_layers() -> NamedTuple:
    """What ``Flux.state`` gives: a Tuple of NamedTuples of one type (an ``NTuple``, stored as a
    vector of references)."""
    rng = np.random.default_rng(4)
    return NamedTuple(
        layers=tuple(
            NamedTuple(weight=rng.standard_normal((2, 3)).astype(np.float32), bias=np.zeros(2, np.float32))
            for _ in range(_N)
        )
    )


def _unaligned_layers() -> NamedTuple:
    """Layers whose references lie off 8-byte boundaries (a Bool field first: JLD2 packs a
    struct's fields without padding), which Reader.prime reads column by column."""
    rng = np.random.default_rng(5)
    return NamedTuple(
        layers=tuple(
            NamedTuple(on=i % 2 == 0, weight=rng.standard_normal((2, i % 3 + 1)), bias=np.full(2, float(i)))
            for i in range(_N)
        )
    )


def _arrays_in(value: Any) -> int:
    if isinstance(value, np.ndarray):
        return 1
    if isinstance(value, (tuple, list)):
        return sum(map(_arrays_in, value))
    if isinstance(value, Mapping):  # a NamedTuple
        return sum(map(_arrays_in, value.values()))
    return 0


def _same(node: Any, loaded: Any) -> int:
    """Compare the lazy ``node`` with the loaded value; the number of arrays met."""
    if node.kind == "array":
        value = np.asarray(loaded)
        assert node.shape == value.shape and node.dtype == value.dtype and node.ndim == value.ndim
        np.testing.assert_array_equal(np.asarray(node), value)
        return 1
    if node.kind in ("tuple", "vector"):
        assert node.keys() == list(range(len(loaded)))
        return sum(_same(node[i], loaded[i]) for i in node.keys())
    if node.kind == "namedtuple":
        assert node.keys() == list(loaded.keys())
        return sum(_same(node[k], loaded[k]) for k in node.keys())
    assert node.read() == loaded
    return 0


@pytest.mark.parametrize("make", [_mixed_layers, _flux_layers, _unaligned_layers])
def test_children_in_any_order_match_load(make: Any, tmp_path: Path) -> None:
    path = tmp_path / "layers.jld2"
    tx.save(path, st=make())
    loaded = tx.load(path)["st"]["layers"]
    order = [149, 0, 64, 63, 127, 128, 65, *range(_N)]  # block edges first, then all
    with tx.open(path) as f:
        layers = f["st"]["layers"]
        assert len(layers) == _N
        arrays = 0
        for i in order:
            node = layers[i]
            assert node.path == ("st", "layers", i + 1)
            if node.kind in ("namedtuple", "tuple"):
                assert layers[i] is node  # a struct child is made once and kept
            arrays += _same(node, loaded[i])
        assert arrays == sum(_arrays_in(loaded[i]) for i in order)
        assert type(layers).__name__ in ("RefVectorNode", "DelegateNode")  # (what is tested here)
        assert layers[-1].path == ("st", "layers", _N)
        # the fields by name: what read() gives, at the field's path
        first = layers[0]
        assert first["weight"].path == ("st", "layers", 1, "weight")
        assert first["weight"].object_address is not None
        np.testing.assert_array_equal(first["bias"].read(), loaded[0]["bias"])
        assert first.read()["bias"].tolist() == loaded[0]["bias"].tolist()
        with pytest.raises(KeyError):
            first["nope"]


def test_children_after_close_refuse(tmp_path: Path) -> None:
    path = tmp_path / "layers.jld2"
    tx.save(path, st=_mixed_layers())
    f = tx.open(path)
    layers = f["st"]["layers"]
    made = layers[0]
    f.close()
    with pytest.raises(ValueError, match="closed"):
        layers[100]  # another block: made now, from a closed file
    with pytest.raises(ValueError, match="closed"):
        layers[109]  # an array element (not read by prime)
    with pytest.raises(ValueError, match="closed"):
        made["weight"]  # its array's node needs the file


def test_path_bound_holds_for_block_children(tmp_path: Path) -> None:
    """A vector too deep for the path bound gives no struct children in bulk either: each
    element takes the one-by-one path, which reports the limit with the element's path."""
    path = tmp_path / "deep.jld2"
    tx.save(path, st=_mixed_layers())
    limits = tx.Limits(max_depth=1)  # 4 * max_depth + 16 segments
    with tx.open(path, limits=limits) as f:
        layers = f["st"]["layers"]
        reader = layers._reader
        reader.max_path = len(layers.path)  # (as if the vector lay at the bound)
        with pytest.raises(tx.LimitError) as err:
            layers[0]["weight"]
        assert err.value.path is not None and err.value.path[:2] == ("st", "layers")


def test_block_children_paths_and_their_leaves_at_the_bound(tmp_path: Path) -> None:
    """A layer made in bulk keeps its path as its vector's path and its position (no tuple of
    its own): ``path`` is the full path all the same, its leaves' paths extend it, and the path
    bound counts it whole (a leaf one segment past the bound is refused, with its path)."""
    path = tmp_path / "layers.jld2"
    w = np.ones((2, 3), np.float32)
    tx.save(path, st=NamedTuple(layers=tuple(NamedTuple(weight=w, bias=w[0]) for _ in range(40))))
    with tx.open(path) as f:
        layers = f["st"]["layers"]
        assert [layers[i].path for i in (0, 17, 39)] == [("st", "layers", k) for k in (1, 18, 40)]
        assert layers[17]["bias"].path == ("st", "layers", 18, "bias")
        assert layers[17] is layers[17] and "layers[18]" in repr(layers[17])
    for room, refused in ((2, False), (1, True)):
        with tx.open(path) as f:
            layers = f["st"]["layers"]
            layers._reader.max_path = len(layers.path) + room  # (as if the vector lay near the bound)
            layer = layers[5]
            assert layer.path == ("st", "layers", 6)
            if refused:
                with pytest.raises(tx.LimitError) as err:
                    layer["weight"]
                assert err.value.path is not None and err.value.path[:3] == ("st", "layers", 6)
            else:
                assert layer["weight"].path == ("st", "layers", 6, "weight")


def test_array_decoded_in_memory_is_described_by_its_value() -> None:
    """A vlen sequence of numbers decodes to an array held in memory: its node has the value's
    shape and dtype, no object address, and reads as the value in either order."""
    from _jld2_builder import Builder, space, t_float, t_vlen

    values = np.array([1.5, -2.0, 3.25])
    b = Builder()
    b.link("x", b.dataset(t_vlen(t_float(8)), space("scalar"), b.vlen(values.tobytes(), len(values))))
    raw = b.finish()
    with tx.open(raw) as f:
        node = f["x"]
        assert node.kind == "array"
        assert node.shape == (3,) and node.dtype == np.float64 and node.size == 3 and len(node) == 3
        assert node.object_address is None
        np.testing.assert_array_equal(np.asarray(node), values)
        np.testing.assert_array_equal(node.read(), values)
        np.testing.assert_array_equal(node.read(order="storage"), values)
        assert node[1] == -2.0


def test_block_children_keep_their_own_children(tmp_path: Path) -> None:
    """Layers made in bulk share one empty, write-refusing cache until they keep a child: the
    first non-array field looked at gives a layer a cache of its own, kept (same node when asked
    again) and never seen by another layer."""
    path = tmp_path / "layers.jld2"
    tx.save(path, st=_mixed_layers())
    loaded = tx.load(path)["st"]["layers"]
    with tx.open(path) as f:
        layers = f["st"]["layers"]
        named = [i for i in range(_N) if isinstance(loaded[i], NamedTuple) and "scale" in loaded[i]]
        assert len(named) > 3
        first, second = layers[named[1]], layers[named[2]]  # (made by one block)
        assert first._cache is second._cache and not first._cache  # shared, empty
        scale = first["scale"]
        assert first["scale"] is scale and scale.read() == loaded[named[1]]["scale"]
        assert first._cache is not second._cache and not second._cache
        assert second["scale"].read() == loaded[named[2]]["scale"] != scale.read()
        assert [n for _, n in first.children()][2] is scale  # children() finds it kept
        third = layers[named[3]]
        with pytest.raises(TypeError):
            third._cache[0] = scale  # the shared cache refuses a write that bypasses _keep
        assert not third._cache and third["scale"].read() == loaded[named[3]]["scale"]


@pytest.mark.parametrize("make", [_flux_layers, _unaligned_layers, _mixed_layers])
def test_prime_finds_every_reference_of_the_elements(make: Any, tmp_path: Path) -> None:
    """The references ``Reader.prime`` vouches for (``_refs_in``: word columns when aligned,
    byte columns otherwise) are every nonzero reference field of every element read, field by
    field: decoded one by one here from the same bytes."""
    from treexchange._jld2._plans import CompoundPlan, ReferencePlan
    from treexchange._jld2._reader import _refs_in

    path = tmp_path / "layers.jld2"
    tx.save(path, st=make())
    with tx.open(path) as f:
        layers = f["st"]["layers"]
        layers[1]  # primes the vector: its struct elements read into groups
        read = layers._reader._element_groups
        groups = [(info.plan, blob) for info, blob in read if type(info.plan) is CompoundPlan]
        assert groups
        for plan, blob in groups:
            n, size = len(blob) // plan.size, plan.size
            fields = [f for f in plan.fields if type(f.plan) is ReferencePlan]
            expected = [ReferencePlan.address(blob, i * size + f.offset) for f in fields for i in range(n)]
            got = _refs_in(plan, blob)
            assert got is not None and got.tolist() == [a for a in expected if a]
