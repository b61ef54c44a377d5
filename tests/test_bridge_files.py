"""Equinox models written with treexchange, compared with what Julia itself writes.

The Julia-written ``flux-state/reinforce-circuits_mymodel.jld2`` holds ``jldsave(...;
model_state = Flux.state(Chain(Dense(1 => 16, ·), Dense(16 => 5), f)))``. Saving the equivalent
Equinox model with ``save(path, model_state=flux_state(model))`` must commit the same Julia types
with the same ``field_names``, ``field_types`` and HDF5 layout (compound members and offsets). The
committed types are described structurally -- the ``julia_type`` attribute through treexchange's
reader (h5py cannot decode it: vlen of references), everything else through h5py -- and compared,
not the bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import equinox as eqx
import h5py
import jax
import numpy as np
import pytest
from conftest import require_fixture, require_one_of_table

import treexchange
from treexchange import flux_state

CIRCUITS = "flux-state/reinforce-circuits_mymodel.jld2"
HEPNET = "flux-state/juliahepnet_model.jld2"


def h5_layout(t: Any) -> Any:
    """An HDF5 datatype as nested (class, size, members) -- offsets included."""
    if isinstance(t, h5py.h5t.TypeCompoundID):
        members = [
            (t.get_member_name(i).decode(), t.get_member_offset(i), h5_layout(t.get_member_type(i)))
            for i in range(t.get_nmembers())
        ]
        return ("compound", t.get_size(), members)
    return (type(t).__name__, t.get_size())


def committed_types(path: Path) -> list[dict[str, Any]]:
    """Every committed type of a JLD2 file, in id order, described structurally."""
    with treexchange.open(path) as f:
        reader = f.reader
        types_group = reader.links(reader.root_address)["_types"]
        julia_types: dict[str, str] = {}
        for name, address in reader.links(types_group).items():
            attr = reader.h5.object(address).attributes["julia_type"]
            if attr.type.committed_at == address:
                julia_types[name] = "Core.DataType"  # the bootstrap type describes itself
            else:
                julia_types[name] = reader.types.type_attribute(attr).qualified()
    out = []
    with h5py.File(path) as h5:
        types = h5["_types"]
        for name in sorted(types):
            t = types[name]
            entry: dict[str, Any] = {"julia_type": julia_types[name], "h5": h5_layout(t.id)}
            if "field_names" in t.attrs:
                entry["field_names"] = [
                    x.decode() if isinstance(x, bytes) else str(x) for x in t.attrs["field_names"]
                ]
            if "field_types" in t.attrs:
                # NULL -> inline/basic; otherwise the julia_type of the committed type referred to
                entry["field_types"] = [
                    julia_types[h5[ref].name.rsplit("/", 1)[-1]] if ref else None
                    for ref in t.attrs["field_types"]
                ]
            if "empty" in t.attrs:
                entry["empty"] = int(t.attrs["empty"])
            out.append(entry)
    return out


def circuits_like_model() -> eqx.nn.Sequential:
    k1, k2 = jax.random.split(jax.random.key(0))
    return eqx.nn.Sequential(
        [eqx.nn.Linear(1, 16, key=k1), eqx.nn.Lambda(jax.nn.relu), eqx.nn.Linear(16, 5, key=k2),
         eqx.nn.Lambda(jax.nn.softmax)]
    )  # fmt: skip


# Dense Flux.states and the Equinox model of each one's shape: the file the test was written for, then the
# bundled one (juliahepnet, JLD2's format 0.1.1: ours is written in that format too, to compare).
EQUINOX_TWINS: dict[str, Any] = {
    CIRCUITS: circuits_like_model,
    HEPNET: lambda: eqx.nn.MLP(3, 1, 64, depth=1, key=jax.random.key(3)),
}


def test_equinox_chain_commits_the_same_types_as_julia(tmp_path: Path) -> None:
    fixture, twin = require_one_of_table(EQUINOX_TWINS)
    with treexchange.open(fixture) as f:
        fmt = f.format_version
    ours = tmp_path / "model.jld2"
    treexchange.save(ours, model_state=flux_state(twin()), format=fmt)
    expected, got = committed_types(fixture), committed_types(ours)
    # the facts the issue names, spelled out, before the full comparison
    names = [t["julia_type"] for t in expected]
    assert any(n.startswith("Core.NamedTuple{(:layers,)") for n in names)
    assert any(n.startswith("Core.NamedTuple{(:weight,:bias,:σ)") for n in names)
    if fmt == "0.2.0":  # its types carry field names and types, and the empty Tuple of σ = ()
        state_type = next(t for t in expected if t["julia_type"].startswith("Core.NamedTuple{(:layers,)"))
        assert state_type["field_names"] == ["layers"]
        dense = next(t for t in expected if t["julia_type"].startswith("Core.NamedTuple{(:weight,:bias,:σ)"))
        assert dense["field_names"] == ["weight", "bias", "σ"] and dense["field_types"] == [
            None,
            None,
            "Tuple",
        ]
        assert {"julia_type": "Tuple", "h5": ("TypeOpaqueID", 1), "empty": 1} in expected
    assert got == expected


def test_equinox_mlp_state_reads_back_in_julia_shape(tmp_path: Path) -> None:
    mlp = eqx.nn.MLP(3, 1, 64, depth=1, key=jax.random.key(3))  # juliahepnet's shape
    path = tmp_path / "hep.jld2"
    treexchange.save(path, model_state=flux_state(mlp))
    # h5py, independently: Julia dims reversed, so weight (out, in) = (64, 3) is stored as (3, 64)
    with h5py.File(path) as h5:
        layers = h5["model_state"][()]["layers"]
        w = h5[layers["1"]["weight"]][()]
        assert w.shape == (3, 64)
        np.testing.assert_array_equal(w.T, np.asarray(mlp.layers[0].weight))
    # and the same structure Julia wrote for the juliahepnet model (apart from the file format
    # version: that fixture is JLD2 0.4's fmt 0.1.1, ours is 0.2.0)
    ours, julia = (
        treexchange.load(path, "model_state"),
        treexchange.load(require_fixture(HEPNET), "model_state"),
    )
    shapes = jax.tree_util.tree_map(np.shape, ours)
    assert shapes == jax.tree_util.tree_map(np.shape, julia)
    back = treexchange.load(path, "model_state", like=mlp, layout=flux_state)
    assert all(
        np.array_equal(np.asarray(a), np.asarray(b))
        for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(mlp))
        if hasattr(a, "shape")
    )


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
def test_lux_style_states_round_trip_through_a_file(tmp_path: Path, dtype: str) -> None:
    import ml_dtypes

    np_dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    ps = {"layer_1": {}, "layer_2": {"weight": np.ones((4, 2), np_dtype), "bias": np.zeros((4, 1), np_dtype)}}
    st = {"layer_1": {}, "layer_2": {}}
    path = tmp_path / "lux.jld2"
    treexchange.save(path, ps=treexchange.to_julia(ps), st=treexchange.to_julia(st))
    assert treexchange.load(path, "st", like=st) == st
    back = treexchange.load(path, "ps", like=ps, numpy=True)
    assert back["layer_2"]["weight"].dtype == np_dtype and back["layer_1"] == {}
    with h5py.File(path) as h5:
        assert h5["st"].shape is None  # an all-empty NamedTuple is a NULL-dataspace dataset, as in Julia
