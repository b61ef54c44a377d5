"""``leaves()``: every leaf's path and node, for every reader's files.

The JLD2 walk (treexchange._jld2._nodes, its leaves section) makes a model's leaves straight
from the bytes of its layers and Dicts; the reference is the protocol's own walk over ``children()``
(``_nodeproto.walk_leaves``), which every reader shares. Both must list the same leaves, in the
same order, with the same paths, kinds, types, shapes and addresses, on real files and on trees
that take each of the fast paths (many layers, Dicts of arrays, shared arrays, cycles, nodes made
before the walk, bounds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from conftest import all_fixtures_or_skip, fixture_ids

import treexchange as tx
from treexchange import JuliaDict, JuliaStruct, LimitError, NamedTuple
from treexchange._nodeproto import LazyNode, walk_leaves

REAL = all_fixtures_or_skip("**/*.jld2") + all_fixtures_or_skip("**/*.bson")


def _records(pairs: Any) -> list[tuple[Any, ...]]:
    return [
        (p, n.kind, str(n.julia_type), n.shape, n.dtype, n.object_address, tuple(n.path)) for p, n in pairs
    ]


def _reference(root: LazyNode, budget: int = 10**6) -> list[tuple[Any, ...]]:
    return _records(walk_leaves(root, budget))


def _layers(n: int) -> NamedTuple:
    rng = np.random.default_rng(n)
    return NamedTuple(
        layers=tuple(
            NamedTuple(
                weight=rng.standard_normal((4, 3)).astype(np.float32),
                bias=rng.standard_normal(4).astype(np.float32),
                σ=(),
            )
            for _ in range(n)
        )
    )


@pytest.mark.parametrize("path", REAL, ids=fixture_ids([p for p in REAL if isinstance(p, Path)]))
def test_real_files_list_the_leaves_the_protocol_walk_lists(path: Path) -> None:
    with tx.open(path) as f:
        fast = _records(f.leaves())
    with tx.open(path) as f:
        assert fast == _reference(f)
    assert all(p == node_path for p, *_, node_path in fast)


@pytest.mark.parametrize("n", [3, 40, 130])  # below and above the bulk read of a vector's layers
def test_a_models_layers_give_every_array_at_its_path_with_its_data(tmp_path: Path, n: int) -> None:
    state = _layers(n)
    path = tmp_path / "model.jld2"
    tx.save(path, model_state=state, step=np.int64(7))
    with tx.open(path) as f:
        got = list(f.leaves())
        expected = [
            (("model_state", "layers", j + 1, field), leaf)
            for j, layer in enumerate(state["layers"])
            for field, leaf in layer.items()
        ] + [(("step",), 7)]
        assert [p for p, _ in got] == [p for p, _ in expected]
        for (p, node), (_, value) in zip(got, expected):
            if isinstance(value, np.ndarray):
                assert node.kind == "array" and node.shape == value.shape and node.dtype == value.dtype
                np.testing.assert_array_equal(np.asarray(node), value)
                assert str(node.julia_type) == f"Array{{Float32, {value.ndim}}}"
            else:
                assert node.read() == value
            assert tuple(node.path) == p
    with tx.open(path) as f:
        assert _records(f.leaves()) == _reference(f)


def test_nodes_made_before_the_walk_are_the_ones_it_gives_and_the_rest_match(tmp_path: Path) -> None:
    path = tmp_path / "model.jld2"
    tx.save(path, st=_layers(70))
    with tx.open(path) as f:
        layer = f["st"]["layers"][37]  # made (and kept by its vector) before the walk
        weight = f["st"]["layers"][5]["weight"]  # an array node: made again when asked
        leaves = dict(f.leaves())
        assert leaves[("st", "layers", 38, "weight")].object_address == layer["weight"].object_address
        assert leaves[("st", "layers", 6, "weight")].object_address == weight.object_address
    with tx.open(path) as f:
        f["st"]["layers"][37]
        mixed = _records(f.leaves())
    with tx.open(path) as f:
        assert mixed == _records(f.leaves()) == _reference(f)


def test_dicts_of_dicts_and_flat_dicts_list_their_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    inner = {f"g{i}": JuliaDict({f"w{j}": rng.standard_normal(j + 1) for j in range(40)}) for i in range(6)}
    flat = JuliaDict({f"k{j}": np.full(3, j, np.int32) for j in range(50)})
    mixed = JuliaDict({"a": np.zeros(2), "b": "text", "c": (1, np.ones(2)), "d": JuliaDict()})
    path = tmp_path / "dicts.jld2"
    tx.save(path, nested=JuliaDict(inner), flat=flat, mixed=mixed)
    with tx.open(path) as f:
        got = dict(f.leaves())
        assert _records(got.items()) == _reference(f)
    assert len(got) == 6 * 40 + 50 + 4  # mixed: a, b, and the tuple's two; the empty Dict none
    with tx.open(path) as f:
        leaves = dict(f.leaves())
        np.testing.assert_array_equal(np.asarray(leaves[("nested", "g3", "w7")]), inner["g3"]["w7"])
        np.testing.assert_array_equal(np.asarray(leaves[("flat", "k49")]), flat["k49"])
        assert leaves[("mixed", "b")].read() == "text" and leaves[("mixed", "c", 1)].read() == 1


def test_an_array_shared_by_two_places_is_a_leaf_at_both(tmp_path: Path) -> None:
    shared = np.arange(6.0).reshape(2, 3)
    path = tmp_path / "tied.jld2"
    tx.save(path, st=NamedTuple(enc=NamedTuple(w=shared), dec=NamedTuple(w=shared)))
    with tx.open(path) as f:
        leaves = dict(f.leaves())
        assert list(leaves) == [("st", "enc", "w"), ("st", "dec", "w")]
        assert leaves[("st", "enc", "w")].object_address == leaves[("st", "dec", "w")].object_address


def test_a_cycle_of_mutable_structs_is_walked_once(tmp_path: Path) -> None:
    root = JuliaStruct("Main.Node", {"value": np.zeros(2), "parent": None}, mutable=True)
    child = JuliaStruct("Main.Node", {"value": np.ones(3), "parent": root}, mutable=True)
    root.fields["parent"] = child
    path = tmp_path / "tree.jld2"
    tx.save(path, tree=root, again=child)
    with tx.open(path) as f:
        got = _records(f.leaves())
        assert got == _reference(f)
    assert [p for p, *_ in got] == [("tree", "value"), ("tree", "parent", "value")]


def test_the_node_budget_bounds_the_walk(tmp_path: Path) -> None:
    path = tmp_path / "model.jld2"
    tx.save(path, st=_layers(40))
    with tx.open(path, limits=tx.Limits(max_nodes=30)) as f:
        with pytest.raises(LimitError, match="more than 30 nodes") as info:
            list(f.leaves())
        assert info.value.path[:2] == ("st", "layers")
        with pytest.raises(LimitError, match="more than 30 nodes"):
            list(walk_leaves(f, 30))


def test_a_file_closed_while_walking_stops_the_walk(tmp_path: Path) -> None:
    path = tmp_path / "model.jld2"
    tx.save(path, st=_layers(40))
    f = tx.open(path)
    walk = f.leaves()
    next(walk)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        next(walk)
    with pytest.raises(ValueError, match="closed"):
        f.leaves()


def test_a_leaf_and_a_subtree_list_their_own_leaves(tmp_path: Path) -> None:
    path = tmp_path / "model.jld2"
    tx.save(path, st=_layers(40))
    with tx.open(path) as f:
        weight = f["st"]["layers"][3]["weight"]
        assert [(p, n.object_address) for p, n in weight.leaves()] == [
            (("st", "layers", 4, "weight"), weight.object_address)
        ]
        layer = f["st"]["layers"][3]
        assert [p for p, _ in layer.leaves()] == [("st", "layers", 4, k) for k in ("weight", "bias", "σ")]
        assert _records(f["st"]["layers"].leaves()) == _reference(f["st"]["layers"])


@pytest.mark.parametrize("depth", range(34, 41))
def test_paths_at_the_depth_bound_end_as_the_protocol_walk_ends(tmp_path: Path, depth: int) -> None:
    # A model's layers (read in bulk) nested so deep that their fields' paths reach the bound
    # (4 * max_depth + 16 = 40 segments): the same leaves, or the same LimitError, both ways.
    value: Any = _layers(40)
    for _ in range(depth - 2):
        value = [value, 1]
    path = tmp_path / "deep.jld2"
    tx.save(path, deep=value)
    fast, reference = _both_ways(path, tx.Limits(max_depth=6))
    assert fast == reference


def _dicts_of_arrays(tmp_path: Path) -> Path:
    """A Dict of six Dicts of 40 arrays each, and a flat Dict of 50: the Dicts whose values
    the JLD2 walk gives as one run (every value an array described alike)."""
    rng = np.random.default_rng(1)
    inner = {f"g{i}": JuliaDict({f"w{j}": rng.standard_normal(3) for j in range(40)}) for i in range(6)}
    path = tmp_path / "dicts.jld2"
    tx.save(path, nested=JuliaDict(inner), flat=JuliaDict({f"k{j}": np.zeros(2) for j in range(50)}))
    return path


@pytest.mark.parametrize("max_nodes", [3, 4, 43, 44, 100, 130, 247, 248, 249, 297, 298])
def test_the_node_budget_counts_the_leaves_of_a_dict_given_at_once(tmp_path: Path, max_nodes: int) -> None:
    # A Dict whose values are all arrays is counted whole before its leaves are given: within
    # the budget, the same leaves; past it, the same LimitError at the same leaf, both ways.
    path = _dicts_of_arrays(tmp_path)
    outcomes = []
    for fast in (True, False):
        with tx.open(path, limits=tx.Limits(max_nodes=max_nodes)) as f:
            listed = []
            walk = f.leaves() if fast else walk_leaves(f, max_nodes)
            try:
                for p, node in walk:
                    listed.append((p, node.shape))
            except LimitError as err:
                listed.append((str(err), err.path))
            outcomes.append(listed)
    assert outcomes[0] == outcomes[1]
    # the nodes in walk order: nested, then each inner Dict and its 40 arrays, then flat and its 50
    order = ["dict"] + (["dict"] + ["array"] * 40) * 6 + ["dict"] + ["array"] * 50
    listed = order[:max_nodes].count("array")
    assert len(outcomes[0]) == listed + (max_nodes < len(order))  # (+ the LimitError)


def test_a_large_dict_of_arrays_and_other_values_lists_each(tmp_path: Path) -> None:
    # Arrays among other values (not one run): the arrays from their references, the rest as
    # their nodes, in the Dict's order.
    values: dict[str, Any] = {f"w{j}": np.full(2, j, np.float32) for j in range(36)}
    values.update(b=np.zeros(3, np.int64), s="text", t=(1, np.ones(2)), d=JuliaDict({"x": np.ones(1)}))
    path = tmp_path / "mixed.jld2"
    tx.save(path, m=JuliaDict(values))
    with tx.open(path) as f:
        got = _records(f.leaves())
        assert got == _reference(f)
    assert [p for p, *_ in got][-6:] == [
        ("m", "w35"),
        ("m", "b"),
        ("m", "s"),
        ("m", "t", 1),
        ("m", "t", 2),
        ("m", "d", "x"),
    ]


def test_a_file_closed_within_a_dicts_leaves_stops_the_walk(tmp_path: Path) -> None:
    path = _dicts_of_arrays(tmp_path)
    f = tx.open(path)
    walk = f.leaves()
    got = [next(walk) for _ in range(5)]  # (within the first inner Dict's run)
    assert [p for p, _ in got] == [("nested", "g0", f"w{j}") for j in range(5)]
    f.close()
    with pytest.raises(ValueError, match="closed"):
        next(walk)


def test_plain_hdf5_and_bson_files_list_their_leaves(tmp_path: Path) -> None:
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as h:
        h["w"] = np.arange(6.0).reshape(3, 2)
        h.create_group("g")["b"] = np.arange(4, dtype=np.int32)
        h["s"] = "text"
    with tx.open(plain, allow_hdf5=True) as f:
        got = list(f.leaves())
        assert [(p, n.kind, n.shape) for p, n in got] == [
            (("g", "b"), "array", (4,)),
            (("s",), "string", None),  # (the protocol: no shape for a string)
            (("w",), "array", (2, 3)),
        ]
        assert [p for p, _ in f["g"].leaves()] == [("g", "b")]
    from treexchange._bson._writer import bson_file  # (a BSON.jl file made in memory)

    raw = bson_file({"acc": 0.98, "v": [1.0, "x", [2, 3]]})
    with tx.open(raw) as f:
        got = [(p, n.kind) for p, n in f.leaves()]
        assert got == [(p, n.kind) for p, n in walk_leaves(f, 10**6)]
    assert got == [
        (("acc",), "number"),
        (("v", 1), "number"),
        (("v", 2), "string"),
        (("v", 3, 1), "number"),
        (("v", 3, 2), "number"),
    ]


def test_a_plain_hdf5_compounds_fields_are_listed_within_the_files_node_budget(tmp_path: Path) -> None:
    # A compound dataset is read at once and its fields are value nodes; their leaves() keeps the
    # file's Limits.max_nodes at any depth (it used to fall back to the default bound there).
    inner = np.dtype([("a", "<f8"), ("b", "<f8"), ("c", "<f8")])
    path = tmp_path / "compound.h5"
    with h5py.File(path, "w") as h:
        h["rec"] = np.array([(1, (1.0, 2.0, 3.0))], dtype=[("x", "<i4"), ("inner", inner)])[0]
    with tx.open(path, allow_hdf5=True) as f:
        assert [p for p, _ in f["rec"]["inner"].leaves()] == [("rec", "inner", k) for k in "abc"]
    with tx.open(path, allow_hdf5=True, limits=tx.Limits(max_nodes=3)) as f:
        assert len(list(f["rec"]["inner"].leaves())) == 3
        with pytest.raises(tx.LimitError, match="more than 3 nodes") as err:
            list(f["rec"].leaves())
        assert err.value.path == ("rec", "inner", "b")
    with tx.open(path, allow_hdf5=True, limits=tx.Limits(max_nodes=2)) as f:
        with pytest.raises(tx.LimitError, match="more than 2 nodes") as err:
            list(f["rec"]["inner"].leaves())
        assert err.value.path == ("rec", "inner", "c")


@pytest.mark.parametrize("max_nodes", [60, 130, 161, 162, 204, 205])
def test_the_node_budget_counts_layers_walked_from_their_bytes(tmp_path: Path, max_nodes: int) -> None:
    # The layers the JLD2 walk lists from their bytes (no node made) count toward the budget as
    # the protocol walk counts them (one each, a layer met again too): the same leaves, or the
    # same LimitError at the same path, both ways.
    shared = JuliaStruct("Main.Layer", {"w": np.zeros(2), "b": np.ones(1)}, mutable=True)
    path = tmp_path / "model.jld2"
    tx.save(path, st=_layers(40), tied=[shared] * 40)  # 2 + 40 + 120 nodes, then 1 + 40 + 2
    fast, reference = _both_ways(path, tx.Limits(max_nodes=max_nodes))
    assert fast == reference
    assert len(fast) == (122 if max_nodes >= 205 else 1)  # (all listed, or the LimitError)


def _both_ways(path: Path, limits: tx.Limits) -> list[list[Any]]:
    """The records ``leaves()`` and ``walk_leaves`` (the file's node budget) give of the file
    at ``path`` opened with ``limits``, or the LimitError each raises (as ``[message]``)."""
    outcomes = []
    for fast in (True, False):
        with tx.open(path, limits=limits) as f:
            try:
                walk = f.leaves() if fast else walk_leaves(f, limits.nodes_for(f.file_size))
                outcomes.append(_records(walk))
            except LimitError as err:
                outcomes.append([str(err)])
    return outcomes


def test_a_closed_plain_hdf5_file_refuses_to_list_its_leaves(tmp_path: Path) -> None:
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as h:
        h["w"] = np.arange(6.0)
        h.create_group("g")["b"] = np.arange(4, dtype=np.int32)
    f = tx.open(plain, allow_hdf5=True)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        list(f.leaves())
    with pytest.raises(ValueError, match="closed"):
        list(f.children())
