"""Every Julia-written fixture reads, and agrees with h5py wherever h5py can read the same data."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from _h5walk import is_numeric, julia_shape, reachable_datasets
from conftest import (
    NESTED_GROUPS,
    all_fixtures_or_skip,
    fixture_files,
    fixture_ids,
    require_fixture,
    require_one_of,
    require_one_of_table,
)

import treexchange as tx
from treexchange import MISSING, JuliaArray, JuliaStruct, NamedTuple, Symbol, WrongFormatError
from treexchange._jld2._reader import Session

FIXTURES = all_fixtures_or_skip()
IDS = fixture_ids(fixture_files()) or None
# The JLD2 files only (a JLD v1 file is refused, test_every_fixture_loads): h5py's view to compare with.
JLD2_FIXTURES = all_fixtures_or_skip("**/*.jld2")
JLD2_IDS = fixture_ids(fixture_files("**/*.jld2")) or None


def _is_jld1(path: Path) -> bool:
    return path.suffix == ".jld"


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_every_fixture_loads(path: Path) -> None:
    if _is_jld1(path):
        with pytest.raises(WrongFormatError, match=r"JLD \(v1\) file, not JLD2"):
            tx.load(path)
        return
    data = tx.load(path)
    assert isinstance(data, dict) and data
    with tx.open(path) as f:
        assert list(f) == list(data)
        assert "_types" not in f
        assert f.format_version in ("0.1", "0.1.0", "0.1.1", "0.2.0")
        assert f.producer.startswith(" (Julia ")


@pytest.mark.parametrize("path", JLD2_FIXTURES, ids=JLD2_IDS)
def test_numeric_datasets_match_h5py(path: Path) -> None:
    """Same bytes, shapes reversed, for every numeric dataset h5py reaches through references."""
    datasets = reachable_datasets(path)
    checked = 0
    with tx.open(path) as f:
        reader = f.reader
        session = Session(reader)
        for addr, ds in datasets.items():
            if not is_numeric(ds):
                continue
            info = reader.info(addr)
            expected = ds[()]
            if ds.ndim == 0:
                ours = session.load_ref(addr, ())
                cast = {"b": int, "i": int, "u": int, "f": float, "c": complex}[ds.dtype.kind]
                assert cast(ours) == cast(expected)
            else:
                assert info.shape == julia_shape(ds)
                arr = reader.numeric_array(info, "storage")
                assert arr.tobytes() == np.ascontiguousarray(expected).tobytes()
                julia = reader.numeric_array(info, "julia")
                assert julia.shape == info.shape
                # Julia's W[i, j] is h5py's w[j, i]: the transpose of the storage view.
                assert np.ascontiguousarray(julia.T).tobytes() == np.ascontiguousarray(expected).tobytes()
            checked += 1
    if path.name not in _NO_NUMERIC:
        assert checked, "no numeric dataset compared"


# Files whose numeric data all sit inside compounds or that h5py cannot open at all.
_NO_NUMERIC = {
    "readas_foo_a.jld2",
    "readas_foo_n_a.jld2",
    "readas_foo_n_sin.jld2",
    "readas_foo_sin.jld2",
    "recoverable_changes_in_structs.jld2",
    "singleton_struct_fields.jld2",
    "struct_reconstruction.jld2",
    "unionall_typeparam.jld2",
    "kitml_test_model_fastdense.jld2",
    "csawparallel_test.jld2",
}


def _walk_values(value: Any):  # type: ignore[no-untyped-def]
    yield value
    if isinstance(value, (NamedTuple, dict)):
        for v in value.values():
            yield from _walk_values(v)
    elif isinstance(value, JuliaStruct):
        for v in value.fields.values():
            yield from _walk_values(v)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _walk_values(v)
    elif isinstance(value, JuliaArray):
        for v in value:
            yield from _walk_values(v)


# --- Flux.state files: complete structure, every () present ----------------------------------


def test_silver_bullet_lenet_structure() -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    state = tx.load(path, "lenet_state")
    assert isinstance(state, NamedTuple) and list(state) == ["layers"]
    layers = state.layers
    assert isinstance(layers, tuple) and len(layers) == 8
    assert [i for i, layer in enumerate(layers) if layer == ()] == [1, 3, 4]
    conv = layers[0]
    assert list(conv) == ["σ", "weight", "bias", "stride", "pad", "dilation", "groups"]
    assert conv["σ"] == ()
    assert conv.weight.shape == (5, 5, 1, 6) and conv.weight.dtype == np.float32
    assert conv.stride == (1, 1) and type(conv.stride[0]) is np.int64
    assert conv.pad == (0, 0, 0, 0) and conv.groups == 1
    dense = layers[5]
    assert list(dense) == ["weight", "bias", "σ"] and dense.weight.shape == (120, 256)
    # Julia W[i, j] == Python w[i-1, j-1]: compare with h5py's reversed-dims view.
    import h5py

    with h5py.File(path) as f:
        ref = f["lenet_state"][()]["layers"]["6"]["weight"]
        assert np.array_equal(dense.weight, f[ref][()].T)


# The Dense-layer Flux.state files (DENSE_FLUX_STATE): each layer's weight shape (Julia out×in), or None
# for a stateless layer (its state is ``()``).
DENSE_STATE_SHAPES = {
    "flux-state/reinforce-circuits_mymodel.jld2": [(16, 1), (5, 16), None],
    "flux-state/juliahepnet_model.jld2": [(64, 3), (1, 64)],
}


def test_dense_flux_state_structure() -> None:
    path, shapes = require_one_of_table(DENSE_STATE_SHAPES)
    state = tx.load(path, "model_state")
    assert list(state) == ["layers"]
    assert isinstance(state.layers, tuple) and len(state.layers) == len(shapes)
    for layer, shape in zip(state.layers, shapes):
        if shape is None:
            assert layer == ()
            continue
        assert list(layer) == ["weight", "bias", "σ"] and layer["σ"] == ()
        assert layer.weight.shape == shape and layer.bias.shape == shape[:1]
        assert layer.weight.dtype == np.float32


@pytest.mark.parametrize(
    "rels",
    [
        ("flux-state/silver-bullet_lenet.jld2",),
        # a Dense chain ending in a stateless layer; the bundled one (a bias = false too) when absent
        ("flux-state/reinforce-circuits_mymodel.jld2", "flux-state/lightglow51_777_model.jld2"),
        ("flux-state/juliahepnet_model.jld2",),
    ],
    ids=lambda rels: rels[0],
)
def test_every_dense_and_conv_state_has_sigma(rels: tuple[str, ...]) -> None:
    state = tx.load(require_one_of(rels))
    layers_with_weights = [v for v in _walk_values(state) if isinstance(v, NamedTuple) and "weight" in v]
    assert layers_with_weights
    for layer in layers_with_weights:
        assert "σ" in layer and layer["σ"] == ()


# Lux files: the names of their parameters and states, a layer without parameters or state and what it
# reads as (EikoNet saved ``()``, Lux's tutorial an empty NamedTuple), and a weight's shape (Julia out×in).
LUX_FILES = {
    "lux/eikonet_model.jld2": ("ps", "st", ("ps", "layer_1"), (), ("ps", "layer_2", "weight"), (16, 4)),
    "lux/lux-docs_v0.5.23_trained_model.jld2": (
        "ps_trained",
        "st_trained",
        ("st_trained", "classifier"),
        NamedTuple(),
        ("ps_trained", "lstm_cell", "weight_h"),
        (32, 8),
    ),
}


def test_lux_parameters_and_empty_states() -> None:
    path, (ps_name, st_name, empty_at, empty, weight_at, shape) = require_one_of_table(LUX_FILES)
    data = tx.load(path)
    assert isinstance(data[ps_name], NamedTuple) and isinstance(data[st_name], NamedTuple)

    def at(names: tuple[str, ...]) -> object:
        value = data[names[0]]
        for name in names[1:]:
            value = value[name]
        return value

    assert type(at(empty_at)) is type(empty) and at(empty_at) == empty and len(empty) == 0
    assert at(weight_at).shape == shape
    arrays = [v for v in _walk_values(data) if isinstance(v, np.ndarray)]
    assert arrays and all(v.dtype == np.float32 for v in arrays)


# --- specific encodings ----------------------------------------------------------------------


def test_small_values_exact_types() -> None:
    data = tx.load(require_fixture("misc/exactpenalty_data.jld2"))
    assert type(data["a"]) is np.int64 and data["a"] == 1
    assert data["b"].dtype == np.int64 and data["b"].tolist() == [1, 2, 3]
    assert data["c"] == "hi" and type(data["c"]) is str
    docs = tx.load(require_fixture("jld2jl/docs_v0.6.0_test.jld2"))
    assert docs["a"] == 42 and docs["b"].tolist() == [1, 2, 3, 4, 5]
    assert docs["c"] == (1, 2) and all(type(x) is np.int64 for x in docs["c"])


def test_singleton_fields_of_32bit_julia() -> None:
    ms = tx.load(require_fixture("jld2testfiles/singleton_struct_fields.jld2"), "ms")
    assert isinstance(ms, JuliaStruct) and ms.type.name == "Main.MissingStruct"
    assert list(ms.fields) == ["a", "b", "c", "d"]
    assert type(ms["a"]) is np.int32 and ms["a"] == 1  # Int on 32-bit Julia
    assert ms["b"] is None and ms["c"] is MISSING and ms["d"] == 2.0
    assert [f.storage for f in ms.layout.fields] == ["inline", "ghost", "ghost", "inline"]


def test_inline_union_vector() -> None:
    data = tx.load(require_fixture("misc/ternarydiagrams_data.jld2"))
    mus = data["mus"]
    assert isinstance(mus, JuliaArray) and str(mus.eltype) == "Union{Nothing, Float64}"
    assert all(x is None or type(x) is np.float64 for x in mus)


def test_vectors_of_arrays_and_symbols() -> None:
    data = tx.load(require_fixture("misc/multistartlh_test.jld2"))
    x, y = data["x"], data["y"]
    assert isinstance(x, JuliaArray) and str(x.eltype) == "Array{Float64, 1}" and len(x) == 2
    assert all(isinstance(v, np.ndarray) and v.shape == (4,) for v in x)
    assert isinstance(y, JuliaArray) and y.tolist() == [Symbol("a"), Symbol("b")]
    assert all(type(s) is Symbol for s in y)


def test_ntuple_longer_than_10_and_struct_arrays() -> None:
    data = tx.load(require_fixture("misc/smlmvis_test.jld2"))
    tuples = [v for v in _walk_values(data) if isinstance(v, tuple) and len(v) == 11]
    assert tuples and all(type(s) is Symbol for s in tuples[0])


def test_legacy_dict_with_doubled_module_prefixes() -> None:
    path = require_fixture("legacy/dsge_test.jld2")
    with tx.open(path) as f:
        assert f.legacy_header and f.format_version == "0.2.0"
        assert str(f["a"].julia_type) == "Dict{Int64, Array{Float64, 1}}"
    a = tx.load(path, "a")
    assert isinstance(a, dict) and len(a) == 5
    assert all(type(k) is np.int64 for k in a) and all(v.dtype == np.float64 for v in a.values())


def test_uint128_and_function_singletons() -> None:
    data = tx.load(require_fixture("misc/betaml_test.jld2"))
    values = list(_walk_values(data))
    assert any(type(v) is tx.UInt128 for v in values)
    assert any(isinstance(v, tx.Singleton) and "#" in v.type.name for v in values)


def test_nested_groups_and_paths() -> None:
    path, (group, entries, _, leaves) = require_one_of_table(NESTED_GROUPS)
    data = tx.load(path)
    for leaf in leaves:  # a "/" path names what the nested dicts hold
        value: Any = data
        for segment in leaf.split("/"):
            value = value[segment]
        assert tx.values_equal(tx.load(path, leaf), value), leaf
    assert list(tx.load(path, group)) == entries
    top, second = group.split("/")[:2]
    with tx.open(path) as f:
        assert isinstance(f[top], tx.Group) and tx.values_equal(
            f[leaves[-1]].read(), tx.load(path, leaves[-1])
        )
        assert f[top][second].path == (top, second)
    if path.name == "unionall_typeparam_v0.1.2.jld2":
        assert data == {"a": 1, "b": {"c": 2, "d": {"e": 3, "f": {"g": 4}}}}
        assert tx.load(path, "b/d/f/g") == 4
        with tx.open(path) as f:
            assert f["b/d/e"].read() == 3


def test_tuple_with_array() -> None:
    obj = tx.load(require_fixture("misc/urop_tuble.jld2"), "single_stored_object")
    assert isinstance(obj, tuple) and obj[0] == 1 and obj[1].shape == (2, 2)


def test_readas_files_with_version_zero_datatypes() -> None:
    # libhdf5 refuses these (datatype message version 0); JLD2 and treexchange read them.
    path = require_one_of(("jld2testfiles/readas_foo_sin.jld2", "misc/csawparallel_test.jld2"))
    with h5py.File(path) as f, pytest.raises(Exception, match="version"):
        f["_types/00000001"]
    if path.name == "csawparallel_test.jld2":  # bundled: a Vector{ComplexF64} of a committed Complex type
        vector = tx.load(path, "single_stored_object")
        assert vector.dtype == np.complex128 and vector.shape == (40,) and np.all(np.isfinite(vector))
        return
    foo = tx.load(path, "foo")
    assert isinstance(foo, JuliaStruct) and foo["fun"] == tx.Singleton("Base.#sin")


def test_storage_order_is_h5py_view() -> None:
    path = require_fixture("flux-jl/xy.jld2")
    julia = tx.load(path, "x")
    storage = tx.load(path, "x", order="storage")
    assert julia.shape == (1, 61) and storage.shape == (61, 1)
    assert julia.flags.f_contiguous and storage.flags.c_contiguous
    assert np.array_equal(julia, storage.T)


def test_arrays_are_writable_views_that_never_touch_the_file(tmp_path: Path) -> None:
    src = require_fixture("flux-state/silver-bullet_lenet.jld2")
    path = tmp_path / "copy.jld2"
    path.write_bytes(src.read_bytes())
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with tx.open(path) as f:
        w = f["lenet_state"]["layers"][5]["weight"].read()
    assert w.flags.writeable and w.base is not None  # a view, not a copy
    w[:] = 7.0  # still valid after close: the view keeps the copy-on-write map alive
    assert float(w.sum()) == 7.0 * w.size
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not np.array_equal(tx.load(path, "lenet_state").layers[5].weight, w)
