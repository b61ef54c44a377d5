"""Julia-written Flux.state and Lux files restored into Equinox models / dict templates.

The weights are checked against h5py (an independent reader: it dereferences the object
references itself; its shapes are Julia's reversed) and the restored Equinox models are run
against a numpy reference of Flux's semantics, ``σ.(W*x .+ b)`` on Julia-shaped ``(features, batch)``
inputs.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import equinox as eqx
import h5py
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import require_fixture, require_one_of, require_one_of_table

import treexchange as tx
from treexchange import MismatchError, NamedTuple, flux_state, load, to_julia, values_equal

HEPNET = "flux-state/juliahepnet_model.jld2"
CIRCUITS = "flux-state/reinforce-circuits_mymodel.jld2"
EIKONET = "lux/eikonet_model.jld2"


def h5_dense_layers(path: Path, name: str = "model_state") -> list[tuple[np.ndarray, np.ndarray]]:
    """(W, b) per Dense layer in Julia's shape, read by h5py (h5py shapes are reversed: transpose)."""
    with h5py.File(path) as f:
        layers = f[name][()]["layers"]
        out = []
        for i in layers.dtype.names:
            w = f[layers[i]["weight"]][()]
            b = f[layers[i]["bias"]][()]
            out.append((w.T, b.T))
        return out


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(z / 2))  # = 1 / (1 + exp(-z)), without overflow warnings


def softmax(z: np.ndarray) -> np.ndarray:  # Flux's softmax: over dims=1, the features
    e = np.exp(z - z.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def flux_forward(layers: list[tuple[np.ndarray, np.ndarray, Any]], x: np.ndarray) -> np.ndarray:
    """Flux Chain of Dense layers on a (features, batch) matrix: σ.(W*x .+ b), layer after layer."""
    for w, b, σ in layers:
        x = σ(w @ x + b[:, None])
    return x


def jax_forward(model: Any, x: np.ndarray) -> np.ndarray:
    return np.asarray(jax.vmap(model)(jnp.asarray(x.T))).T  # Equinox takes one sample at a time


# --- juliahepnet: Chain(Dense(3 => 64, ·), Dense(64 => 1)), JLD2 fmt 0.1.1 ------------------------------


@pytest.fixture
def hepnet_template() -> eqx.nn.MLP:
    return eqx.nn.MLP(3, 1, 64, depth=1, activation=jax.nn.relu, final_activation=jax.nn.sigmoid,
                      key=jax.random.key(1))  # fmt: skip


@pytest.mark.parametrize("layout", [None, flux_state], ids=["plain", "flux-layout"])
def test_hepnet_loads_into_an_equinox_mlp_and_runs_like_flux(
    hepnet_template: eqx.nn.MLP, layout: Any
) -> None:
    path = require_fixture(HEPNET)
    model = load(path, "model_state", like=hepnet_template, layout=layout)
    assert type(model) is eqx.nn.MLP
    oracle = h5_dense_layers(path)
    for layer, (w, b) in zip(model.layers, oracle):
        assert isinstance(layer.weight, jax.Array)
        np.testing.assert_array_equal(np.asarray(layer.weight), w)  # Flux (out, in) = Equinox (out, in)
        np.testing.assert_array_equal(np.asarray(layer.bias), b)
    x = np.random.default_rng(0).normal(size=(3, 7)).astype(np.float32)
    relu = lambda z: np.maximum(z, 0)  # noqa: E731
    expected = flux_forward([(*oracle[0], relu), (*oracle[1], sigmoid)], x)
    np.testing.assert_allclose(jax_forward(model, x), expected, rtol=1e-5, atol=1e-6)


def test_hepnet_into_a_wrong_width_lists_every_mismatch() -> None:
    path = require_fixture(HEPNET)
    narrow = eqx.nn.MLP(3, 1, 32, depth=1, key=jax.random.key(0))
    with pytest.raises(MismatchError) as err:
        load(path, "model_state", like=narrow)
    assert [str(m) for m in err.value.mismatches] == [
        "model_state.layers[1].weight: shape (64, 3) in file, (32, 3) in template",
        "model_state.layers[1].bias: shape (64,) in file, (32,) in template",
        "model_state.layers[2].weight: shape (1, 64) in file, (1, 32) in template",
    ]


# --- reinforce-circuits: Chain(Dense(1 => 16, ·), Dense(16 => 5), <function>), JLD2 fmt 0.2.0 ---------


def circuits_template() -> eqx.nn.Sequential:
    k1, k2 = jax.random.split(jax.random.key(2))
    return eqx.nn.Sequential(
        [
            eqx.nn.Linear(1, 16, key=k1),
            eqx.nn.Lambda(jnp.tanh),  # folded into Dense(1 => 16, tanh)
            eqx.nn.Linear(16, 5, key=k2),
            eqx.nn.Lambda(jax.nn.softmax),  # the stateless trailing layer: () in the file
        ]
    )


# lightglow51_777: Chain(Dense(2 => 1, tanh; bias = false), only) (its repository's model.jl), bundled
LIGHTGLOW = "flux-state/lightglow51_777_model.jld2"


def only(y: Any) -> Any:
    """Julia's ``only``: the one element of a length-1 output (no state: ``()`` in the file)."""
    return y[0]


def lightglow_template() -> eqx.nn.Sequential:
    return eqx.nn.Sequential(
        [
            eqx.nn.Linear(2, 1, use_bias=False, key=jax.random.key(2)),
            eqx.nn.Lambda(jnp.tanh),  # folded into the Dense
            eqx.nn.Lambda(only),  # the stateless trailing layer
        ]
    )


def test_circuits_loads_through_the_flux_layout_and_runs_like_flux() -> None:
    path = require_one_of((CIRCUITS, LIGHTGLOW))
    if path.name == Path(LIGHTGLOW).name:  # the bundled chain of the same kind (CIRCUITS is absent)
        model = load(path, "model_state", like=lightglow_template(), layout=flux_state)
        assert type(model) is eqx.nn.Sequential
        with h5py.File(path) as f:  # the oracle: h5py's (in, out) storage, transposed
            w = f[f["model_state"][()]["layers"]["1"]["weight"]][()].T
        np.testing.assert_array_equal(np.asarray(model.layers[0].weight), w)
        x = np.linspace(-2, 2, 18, dtype=np.float32).reshape(2, 9)
        expected = np.tanh(w @ x)[0]  # only.(tanh.(W * x)): no bias
        np.testing.assert_allclose(jax_forward(model, x), expected, rtol=1e-5, atol=1e-6)
        return
    model = load(path, "model_state", like=circuits_template(), layout=flux_state)
    assert type(model) is eqx.nn.Sequential
    oracle = h5_dense_layers(path)
    np.testing.assert_array_equal(np.asarray(model.layers[0].weight), oracle[0][0])
    np.testing.assert_array_equal(np.asarray(model.layers[2].bias), oracle[1][1])
    x = np.linspace(-2, 2, 9, dtype=np.float32)[None, :]
    expected = softmax(flux_forward([(*oracle[0], np.tanh), (*oracle[1], lambda z: z)], x))
    np.testing.assert_allclose(jax_forward(model, x), expected, rtol=1e-5, atol=1e-6)


def test_circuits_trailing_stateless_layer_must_be_in_the_template() -> None:
    path = require_one_of((CIRCUITS, LIGHTGLOW))
    if path.name == Path(LIGHTGLOW).name:  # the bundled chain of the same kind (CIRCUITS is absent)
        layers, trailing = [eqx.nn.Linear(2, 1, use_bias=False, key=jax.random.key(0))], only
        with h5py.File(path) as f:
            last_weight = f[f["model_state"][()]["layers"]["1"]["weight"]][()].T
    else:
        layers, trailing = list(eqx.nn.MLP(1, 5, 16, depth=1, key=jax.random.key(0)).layers), jax.nn.softmax
        last_weight = h5_dense_layers(path)[1][0]
    with pytest.raises(MismatchError) as err:  # no trailing function layer
        load(path, "model_state", like=eqx.nn.Sequential(layers), layout=flux_state)
    assert [str(m) for m in err.value.mismatches] == [
        f"model_state.layers[{len(layers) + 1}]: extra () in file, not in template"
    ]
    # a template that accounts for it: the layers plus the function, as a plain list
    model = load(path, "model_state", like=[*layers, trailing], layout=flux_state)
    assert np.array_equal(np.asarray(model[len(layers) - 1].weight), last_weight)


def _memory_owner(a: np.ndarray) -> Any:
    """The object at the end of an array's ``base`` chain (a buffer's exporter)."""
    owner: Any = a
    while isinstance(owner, np.ndarray) and owner.base is not None:
        owner = owner.base
    return owner.obj if isinstance(owner, memoryview) else owner


# Dense Flux.states and an Equinox template of each: the file the tests were written for, then the
# bundled one (julia_fixtures/SOURCES.md), so that a fresh clone runs them too.
DENSE_STATE_TEMPLATES: dict[str, Callable[[], eqx.Module]] = {
    CIRCUITS: circuits_template,
    HEPNET: lambda: eqx.nn.MLP(3, 1, 64, depth=1, key=jax.random.key(1)),
}


def test_numpy_restore_stays_zero_copy_on_the_file_map() -> None:
    path, template = require_one_of_table(DENSE_STATE_TEMPLATES)
    model = load(path, "model_state", like=template(), layout=flux_state, numpy=True)
    w = model.layers[0].weight
    assert type(w) is np.ndarray and w.flags.f_contiguous
    assert isinstance(_memory_owner(w), mmap.mmap)  # a view of the file's map, not a copy
    # Through one open File: the restored array is the very memory the lazy node views.
    with tx.open(path) as f:
        model = tx.restore(f.read("model_state"), template(), layout=flux_state, numpy=True)
        node = f["model_state"]["layers"][0]["weight"]
        assert np.shares_memory(model.layers[0].weight, np.asarray(node))
        assert np.array_equal(model.layers[0].weight, h5_dense_layers(path)[0][0])


# --- Lux: ps and an all-empty st (eikonet) ------------------------------------------------------------


def lux_dense(out_size: int, in_size: int) -> dict[str, np.ndarray]:
    return {"weight": np.zeros((out_size, in_size), np.float32), "bias": np.zeros((out_size, 1), np.float32)}


def eikonet_templates() -> tuple[dict[str, Any], dict[str, Any]]:
    block = {"layer_1": lux_dense(32, 16), "layer_2": lux_dense(16, 32)}  # SkipConnection(Chain(...), +)
    ps: dict[str, Any] = {"layer_1": (), "layer_2": lux_dense(16, 4)}
    st: dict[str, Any] = {"layer_1": {}, "layer_2": {}}
    for i in range(3, 9):
        ps[f"layer_{i}"] = {k: dict(v) for k, v in block.items()}
        st[f"layer_{i}"] = {"layer_1": {}, "layer_2": {}}
    ps["layer_9"], st["layer_9"] = lux_dense(1, 16), {}
    return ps, st


def test_lux_ps_and_empty_st_restore_and_round_trip() -> None:
    path = require_fixture(EIKONET)
    ps_like, st_like = eikonet_templates()
    ps = load(path, "ps", like=ps_like)
    st = load(path, "st", like=st_like)
    assert st == st_like  # NamedTuple() states -> {} of the template
    assert list(ps) == list(ps_like) and ps["layer_1"] == ()
    with h5py.File(path) as f:
        raw = f["ps"][()]
        w = f[raw["layer_3"]["layer_2"]["weight"]][()].T
        b = f[raw["layer_9"]["bias"]][()].T
    np.testing.assert_array_equal(np.asarray(ps["layer_3"]["layer_2"]["weight"]), w)
    np.testing.assert_array_equal(np.asarray(ps["layer_9"]["bias"]), b)
    # back to Julia state: exactly what the file holds (NamedTuples in Lux's order, () and NamedTuple())
    # (to_julia takes the jax arrays as they are; jax.device_get would re-sort the dict keys)
    assert values_equal(to_julia(ps), load(path, "ps"))
    assert values_equal(to_julia(st), load(path, "st"))
    assert to_julia(st).layer_3 == NamedTuple(layer_1=NamedTuple(), layer_2=NamedTuple())


def test_lux_empty_dict_also_accepts_an_empty_tuple_layer() -> None:
    path = require_fixture(EIKONET)
    ps_like, _ = eikonet_templates()
    ps_like["layer_1"] = {}  # Lux's usual NamedTuple() for a parameter-free layer; the file has ()
    assert load(path, "ps", like=ps_like, numpy=True)["layer_1"] == {}


def test_a_pickled_flux_chain_struct_restores_into_equinox_layers() -> None:
    # flux-model/hwdr_mlp.jld2 holds a whole Flux model (structs, not Flux.state):
    # Chain(Dense(784 => 16, relu), Dense(16 => 16, relu), Dense(16 => 10), softmax)
    path = require_one_of(("flux-model/hwdr_mlp.jld2", "flux-model/solaris_test_model.jld2"))
    if path.name == "solaris_test_model.jld2":  # bundled: a pickled Flux.Dense(2 => 1, tanh) alone
        template = eqx.nn.Linear(2, 1, key=jax.random.key(0))
        dense = load(path, "nn", like=template)
        assert type(dense) is eqx.nn.Linear
        with h5py.File(path) as f:
            fields = f["nn"][()]
            w, b = f[fields["weight"]][()].T, f[fields["bias"]][()]
        np.testing.assert_array_equal(np.asarray(dense.weight), w)
        np.testing.assert_array_equal(np.asarray(dense.bias), b)
        assert not np.array_equal(np.asarray(template.weight), w)  # the file's numbers went in
        return
    keys = jax.random.split(jax.random.key(0), 3)
    sizes = [(784, 16), (16, 16), (16, 10)]
    like = {"layers": (*(eqx.nn.Linear(i, o, key=k) for (i, o), k in zip(sizes, keys)), jax.nn.softmax)}
    out = load(path, "mlp", like=like)
    assert out["layers"][3] is jax.nn.softmax  # the file's NNlib.#softmax singleton: no state
    with h5py.File(path) as f:
        chain = f["mlp"][()]
        w1 = f[chain["layers"]["1"]["weight"]][()].T
    np.testing.assert_array_equal(np.asarray(out["layers"][0].weight), w1)
    assert out["layers"][2].weight.shape == (10, 16)


def test_without_a_template_load_places_arrays_and_keeps_julia_structure() -> None:
    # Each file's layers: two Dense (their fields), then what else it holds (circuits: a function, ()).
    path, last_layers = require_one_of_table({CIRCUITS: [()], HEPNET: []})
    device = jax.devices()[0]
    state = load(path, "model_state", sharding=jax.sharding.SingleDeviceSharding(device))
    assert type(state) is NamedTuple and list(state.layers[0]) == ["weight", "bias", "σ"]
    assert isinstance(state.layers[0].weight, jax.Array) and list(state.layers[2:]) == last_layers
    assert state.layers[1].weight.devices() == {device}
    scaled = jax.tree_util.tree_map(lambda x: x * 2, state)  # a pytree whose field order survives
    assert list(scaled.layers[1]) == ["weight", "bias", "σ"]
    np.testing.assert_array_equal(np.asarray(scaled.layers[0].bias), 2 * h5_dense_layers(path)[0][1])
