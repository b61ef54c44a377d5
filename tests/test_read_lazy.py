"""The lazy API: ``treexchange.open`` walks a file without touching array data."""

from __future__ import annotations

import struct
from pathlib import Path

import h5py
import numpy as np
import pytest
from _jld2_builder import Attr, Builder, shared, space, t_compound, t_ref
from conftest import (
    DENSE_FLUX_STATE,
    NESTED_GROUPS,
    all_fixtures_or_skip,
    fixture_files,
    fixture_ids,
    require_fixture,
    require_one_of,
    require_one_of_table,
)

import treexchange as tx
from treexchange import NamedTuple


def test_open_parses_only_what_is_asked() -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    with tx.open(path) as f:
        parsed = f.reader.h5._objects
        assert len(parsed) <= 1  # at most the root group
        assert list(f) == ["lenet_state"]
        node = f["lenet_state"]
        n_after_top = len(parsed)
        assert node.kind == "namedtuple" and list(node.keys()) == ["layers"]
        layers = node["layers"]
        assert layers.kind == "tuple" and len(layers) == 8
        conv = layers[0]
        assert conv.kind == "namedtuple" and conv.keys() == [
            "σ",
            "weight",
            "bias",
            "stride",
            "pad",
            "dilation",
            "groups",
        ]
        w = conv["weight"]
        assert isinstance(w, tx.Node) and w.kind == "array"
        assert w.shape == (5, 5, 1, 6) and w.dtype == np.float32 and str(w.julia_type) == "Array{Float32, 4}"
        # Only the weight's header was added by walking down to it (and the committed types).
        arrays_parsed = [
            a
            for a, o in parsed.items()
            if o.kind == "dataset" and o.dataspace and o.dataspace.kind == "simple"
        ]
        assert len(arrays_parsed) == 1
        assert len(parsed) > n_after_top


def test_array_nodes_slice_like_numpy_in_julia_shape() -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    full = tx.load(path, "lenet_state").layers[5].weight
    with tx.open(path) as f:
        node = f["lenet_state"]["layers"][5]["weight"]
        assert node.shape == full.shape == (120, 256) and node.ndim == 2 and node.size == 120 * 256
        assert node.nbytes == full.nbytes and len(node) == 120
        assert np.array_equal(node[2:5, :], full[2:5, :])
        assert node[3, 7] == full[3, 7]
        assert np.array_equal(np.asarray(node), full)
        assert np.array_equal(node.read(order="storage"), full.T)
        with h5py.File(path) as h:
            ref = h["lenet_state"][()]["layers"]["6"]["weight"]
            assert np.array_equal(np.asarray(node)[10:20, 100], h[ref][100, 10:20])
    with pytest.raises(ValueError, match="closed"):
        node.read()


def test_np_array_copies_while_asarray_views_the_shared_map() -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    with tx.open(path) as f:
        node = f["lenet_state"]["layers"][5]["weight"]
        original = np.asarray(node).copy()
        mine = np.array(node)  # copy=True: an array of one's own
        assert not np.shares_memory(mine, np.asarray(node)) and mine.flags.writeable
        mine[0, 0] += 1.0
        assert np.array_equal(np.asarray(node), original)  # later reads do not see it
        with pytest.raises(ValueError, match="copy"):
            np.asarray(node, dtype=np.float64, copy=False)
        assert np.asarray(node, dtype=np.float64).dtype == np.float64
        # asarray / read() are views of the one copy-on-write map of this open File:
        view = np.asarray(node)
        assert np.shares_memory(view, node.read())
        view[0, 0] = 42.0  # documented: changes later reads of this File, never the disk
        assert node.read()[0, 0] == 42.0
    assert tx.load(path, "lenet_state").layers[5].weight[0, 0] == original[0, 0]


def test_file_names_itself_and_load_keeps_internal_key_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    path = require_fixture("misc/exactpenalty_data.jld2")
    with tx.open(path) as f:
        assert f.filename == str(path) and f.path == ()

    def broken(self: object, *args: object, **kwargs: object) -> None:
        raise KeyError("internal")  # a bug inside the read, not a missing name

    monkeypatch.setattr(tx.File, "read", broken)
    with pytest.raises(KeyError, match="internal"):
        tx.load(path, "b")
    with pytest.raises(tx.TreexchangeError, match="no entry named 'zzz'"):
        tx.load(path, "zzz")


# Flux.state files and the node kinds of their layers (a stateless layer's state is the singleton ``()``):
# the file of ../shared the test was written for, then a bundled one (julia_fixtures/SOURCES.md).
LAYER_KINDS = {
    "flux-state/reinforce-circuits_mymodel.jld2": ("model_state", ["namedtuple", "namedtuple", "singleton"]),
    "flux-state/silver-bullet_lenet.jld2": (
        "lenet_state",
        [
            "namedtuple",
            "singleton",
            "namedtuple",
            "singleton",
            "singleton",
            "namedtuple",
            "namedtuple",
            "namedtuple",
        ],
    ),
}


def test_children_paths_and_indexing() -> None:
    path, (name, kinds) = require_one_of_table(LAYER_KINDS)
    stateless = kinds.index("singleton")
    with_sigma = len(kinds) - 1 - kinds[::-1].index("namedtuple")
    with tx.open(path) as f:
        top = f[name]
        assert top.path == (name,)
        layers = top["layers"]
        segs = [seg for seg, _ in layers.children()]
        assert segs == list(range(1, len(kinds) + 1))  # inspect paths are 1-based ...
        assert layers[0].path == (name, "layers", 1)  # ... Python indexing 0-based
        assert layers[stateless].kind == "singleton" and layers[stateless].read() == ()
        assert [n.kind for n in layers] == kinds
        sigma = layers[with_sigma]["σ"]
        assert sigma.kind == "singleton" and str(sigma.julia_type) == "Tuple{}"
        assert layers[0].read() == tx.load(path, name).layers[0]
        with pytest.raises(KeyError):
            layers[0]["nope"]
        with pytest.raises(IndexError):
            layers[len(kinds)]
        with pytest.raises(IndexError):
            layers[0]["weight"]["x"]  # like numpy
        with pytest.raises(TypeError):
            layers[stateless]["x"]
    with pytest.raises(ValueError, match="closed"):
        f[name]


def test_leaf_nodes_and_vectors() -> None:
    path = require_one_of(("misc/seriesforecast_data.jld2", "misc/multistartlh_test.jld2"))
    if path.name == "multistartlh_test.jld2":  # the bundled file: a Vector{Vector}, a Vector{Symbol}
        with tx.open(path) as f:
            x, y = f["x"], f["y"]
            assert x.kind == "vector" and x.shape == (2,) and x[0].kind == "array" and x[0].shape == (4,)
            assert y.kind == "vector" and y[1].kind == "symbol" and y[1].read() == "b"
            assert str(x.read().eltype) == "Array{Float64, 1}"
        with tx.open(require_fixture("legacy/dsge_test.jld2")) as f:
            a = f["a"]
            assert a.kind == "dict" and 3 in a and a[3].kind == "array" and a[3].shape == (10,)
        return
    with tx.open(path) as f:
        names = f["train_df"]["colindex"]["names"]
        assert names.kind == "vector" and names.shape == (5,)
        assert names[1].kind == "symbol" and names[1].read() == "meantemp"
        cols = f["train_df"]["columns"]
        assert cols.kind == "vector" and cols[0].kind == "array" and cols[0].shape == (20,)
        # Vector{AbstractVector}: its element type is a where type, kept (was a list, Vector{Any})
        columns = cols.read()
        assert isinstance(columns, tx.JuliaArray) and str(columns.eltype) == "AbstractArray{T, 1} where T"
        lookup = f["train_df"]["colindex"]["lookup"]
        assert lookup.kind == "dict" and "t" in lookup and lookup["t"].read() == 1


def test_node_read_keeps_identity_within_one_read() -> None:
    b = Builder()
    w = b.array(np.arange(4.0))
    any_t = b.jt_dataset("Core.Any")
    attr = Attr("julia_type", t_ref(), space("scalar"), struct.pack("<Q", any_t))
    b.link("v", b.dataset(t_ref(), space("simple", [2]), struct.pack("<QQ", w, w), [attr]))
    with tx.open(b.finish()) as f:
        v = f["v"].read()
        assert v[0] is v[1]
        node = f["v"]
        assert np.array_equal(node[0].read(), node[1].read())


def test_read_everything_and_one_name() -> None:
    path, (group_path, entries, _, _) = require_one_of_table(NESTED_GROUPS)
    with tx.open(path) as f:
        assert tx.values_equal(f.read(), tx.load(path))
        sub = f.read(group_path)
        assert list(sub) == entries and tx.values_equal(sub, tx.load(path, group_path))
        group = f[group_path]
        assert isinstance(group, tx.Group) and group.kind == "group" and list(group) == entries
        assert tx.values_equal(group.read(), sub)
        if path.name == "unionall_typeparam_v0.1.2.jld2":
            assert f.read() == tx.load(path)
            assert f.read("b/d") == {"e": 3, "f": {"g": 4}}
            assert list(f["b"]) == ["c", "d"] and f["b"].read() == {"c": 2, "d": {"e": 3, "f": {"g": 4}}}
    with pytest.raises(tx.TreexchangeError, match="no entry named"):
        tx.load(path, "zzz")


def test_inline_struct_nodes() -> None:
    b = Builder()
    st = b.commit(t_compound([("w", t_ref(), 8)]), b.jt("Main.S"))
    w = b.array(np.ones(3, np.float32))
    b.link("s", b.dataset(shared(st), space("scalar"), struct.pack("<Q", w)))
    with tx.open(b.finish()) as f:
        node = f["s"]
        assert node.kind == "struct" and node.keys() == ["w"] and node["w"].shape == (3,)
        value = node.read()
        assert isinstance(value, tx.JuliaStruct) and np.array_equal(value["w"], np.ones(3))


def test_repr_and_load_order_validation() -> None:
    path = require_fixture("misc/exactpenalty_data.jld2")
    with tx.open(path) as f:
        assert "exactpenalty_data.jld2" in repr(f) and "b" in repr(f["b"])
    with pytest.raises(ValueError):
        tx.load(path, order="fortran")  # type: ignore[arg-type]
    assert isinstance(tx.load(path, "b", order="storage"), np.ndarray)
    state = tx.load(require_one_of(DENSE_FLUX_STATE), "model_state")
    assert isinstance(state, NamedTuple)


@pytest.mark.parametrize(
    "path", all_fixtures_or_skip("**/*.jld2"), ids=fixture_ids(fixture_files("**/*.jld2")) or None
)
def test_node_kinds_agree_with_loaded_values(path: Path) -> None:
    """Every node's kind is the kind of the value it reads as, and its children are the value's."""
    from treexchange._inspect import walk_nodes
    from treexchange._typeof import kind_of

    with tx.open(path) as f:
        for node, _ in walk_nodes(f):
            if node.kind == "group":
                continue
            value = node.read()
            assert node.kind == kind_of(value), node.path
            if node.kind in ("namedtuple", "struct", "dict"):
                fields = value.fields if isinstance(value, tx.JuliaStruct) else value
                assert [k for k in node.keys()] == list(fields), node.path
            elif node.kind in ("tuple", "vector"):
                n = len(value.tolist()) if isinstance(value, tx.JuliaArray) else len(value)
                assert len(node) == n, node.path  # N-d vectors: every element, linear order


def test_array_nodes_copy_alike(tmp_path: Path) -> None:
    """An array node's kind is its class's (no slot of its own): ``copy.copy`` (a node given a
    new path, ``_reparent``) still makes a node alike, of a dataset or of an array in memory."""
    import copy  # (only this test copies nodes)

    from treexchange._jld2._nodes import ArrayNode, array_node

    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    p = tmp_path / "a.jld2"
    tx.save(p, {"st": NamedTuple(w=w)})
    with tx.open(p) as f:
        node = f["st"]["w"]
        held = array_node(f.reader, ("held",), None, value=w)
        for original in (node, held):
            assert type(original) is ArrayNode and original.kind == "array"
            clone = copy.copy(original)
            assert clone is not original and clone.kind == "array"
            assert (clone.path, clone.julia_type, clone.shape, clone.dtype) == (
                original.path,
                original.julia_type,
                original.shape,
                original.dtype,
            )
            np.testing.assert_array_equal(np.asarray(clone), np.asarray(original))
        with pytest.raises(AttributeError):
            node.kind = "number"  # type: ignore[misc]
