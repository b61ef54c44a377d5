"""``flux_state`` / ``flux_julia`` / restore of Equinox and Flax nnx models: exact Flux.state form per era."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import require_fixture
from flax import nnx
from test_port_lenet import LENET

import treexchange as tx
from treexchange._port import load_state
from treexchange._port._eqx import build_equinox
from treexchange._port._nnx import build_nnx
from treexchange._port._spec import Layer

KEY = jax.random.key(0)
EPSILON = "\u03f5"  # Flux's ϵ, not the NFKC-normalised ε (U+03B5)


def test_batchnorm_state_fields_names_and_types_equinox() -> None:
    bn = eqx.nn.BatchNorm(3, "batch", eps=1e-3, momentum=0.9, mode="ema")
    model, state = eqx.nn.make_with_state(lambda: bn)()
    s = tx.flux_state((model, state))
    assert list(s) == [
        "λ",
        "β",
        "γ",
        "μ",
        "σ²",
        EPSILON,
        "momentum",
        "affine",
        "track_stats",
        "active",
        "chs",
    ]
    assert s["λ"] == () and s["active"] is None and s["affine"] is True and s["track_stats"] is True
    assert type(s[EPSILON]) is np.float32 and s[EPSILON] == np.float32(1e-3)
    assert type(s["momentum"]) is np.float32 and s["momentum"] == np.float32(1 - 0.9)  # Equinox keeps 1 − m
    assert type(s["chs"]) is np.int64 and s["chs"] == 3
    assert all(s[k].shape == (3,) and s[k].dtype == np.float32 for k in ("β", "γ", "μ", "σ²"))


def test_equinox_batchnorm_restores_model_and_state_together() -> None:
    layer = Layer("Chain", children=(Layer("BatchNorm", {"channels": 2}),))
    model = build_equinox(layer, key=KEY)
    like = (model, eqx.nn.State(model))
    state = tx.flux_state(like)
    bn = state.layers[0]
    new = tx.NamedTuple(
        (
            k,
            np.array([0.5, -1.0], np.float32)
            if k == "μ"
            else np.array([4.0, 9.0], np.float32)
            if k == "σ²"
            else v,
        )
        for k, v in bn.items()
    )
    restored_model, restored_state = load_state(like, tx.NamedTuple(layers=(new,)))
    x = jnp.array([[1.0], [2.0]])  # (C, W): one sample
    y, _ = restored_model(x, restored_state)
    np.testing.assert_allclose(
        np.asarray(y)[:, 0], [(1.0 - 0.5) / np.sqrt(4 + 1e-5), 3.0 / np.sqrt(9 + 1e-5)], rtol=1e-6
    )
    inner = restored_model.layers[0]
    assert restored_state.get(inner.ema_first_time_index).item() is False  # training keeps the restored stats


def test_pools_are_empty_in_flux_0_14_and_hyper_parameters_from_0_15() -> None:
    model = build_equinox(
        Layer("Chain", children=(Layer("MaxPool", {"k": (2, 3), "pad": (1, 1, 0, 0)}),)), key=KEY
    )
    assert tx.flux_state(model, flux="0.14").layers == ((),)
    pool = tx.flux_state(model, flux="0.15").layers[0]
    assert list(pool) == ["k", "pad", "stride"]
    assert pool.k == (2, 3) and pool.pad == (1, 1, 0, 0) and pool.stride == (2, 3)
    assert all(type(v) is np.int64 for v in pool.k + pool.pad + pool.stride)


def test_conv_transpose_gains_outpad_in_0_15() -> None:
    layer = Layer("ConvTranspose", {"kernel": (3, 3), "in": 4, "out": 2, "stride": (2, 2)})
    model = build_equinox(layer, key=KEY)
    assert "outpad" not in tx.flux_state(model, flux="0.14")
    s = tx.flux_state(model, flux="0.15")
    assert list(s) == ["σ", "weight", "bias", "stride", "pad", "outpad", "dilation", "groups"]
    assert s.weight.shape == (3, 3, 2, 4)  # (k…, out, in)


def test_conv_state_dense_bias_false_layernorm_dropout_groupnorm() -> None:
    net = Layer(
        "Chain",
        children=(
            Layer("Conv", {"kernel": (3,), "in": 2, "out": 4, "bias": False, "groups": 2}),
            Layer("GroupNorm", {"channels": 4, "groups": 2}),
            Layer("flatten"),
            Layer("Dropout", {"p": 0.25}),
            Layer("Dense", {"in": 8, "out": 3, "bias": False}),
            Layer("LayerNorm", {"size": (3,), "ϵ": 1e-5}),
        ),
    )
    s = tx.flux_state(build_equinox(net, key=KEY))
    conv, gn, flat, drop, dense, ln = s.layers
    assert list(conv) == ["σ", "weight", "bias", "stride", "pad", "dilation", "groups"] and conv.bias is False
    assert conv.weight.shape == (3, 1, 4) and conv.groups == 2 and conv.pad == (0, 0)
    assert list(gn)[:2] == ["G", "λ"] and gn.G == 2 and gn["μ"] is None and gn["σ²"] is None
    assert flat == () and list(drop) == ["p", "dims", "active", "rng"] and drop.p == 0.25 and drop.dims == ()
    assert list(dense) == ["weight", "bias", "σ"] and dense.bias is False
    assert list(ln) == ["λ", "diag", EPSILON, "size", "affine"] and list(ln.diag) == ["scale", "bias", "σ"]
    assert np.isclose(ln[EPSILON], 1e-5)  # Equinox eps = ϵ² (Flux 0.15–0.16.10: √(σ² + ϵ²))


def test_layernorm_has_no_exact_flux_0_14_twin() -> None:
    with pytest.raises(tx.UnsupportedError, match=r"0\.14"):
        tx.flux_state(eqx.nn.LayerNorm(3), flux="0.14")


def test_flux_julia_of_lenet_and_of_other_layers() -> None:
    model = build_equinox(LENET, key=KEY)
    assert tx.flux_julia(model, file="lenet.jld2", name="lenet_state", flux="0.14").splitlines()[1] == (
        "model = Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), "
        "MaxPool((2, 2)), Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
    )
    up = {"kernel": (3, 3), "in": 4, "out": 2, "stride": (2, 2), "pad": (1, 0, 1, 0), "σ": "tanh"}
    other = Layer(
        "Chain",
        children=(
            Layer("ConvTranspose", up),
            Layer("BatchNorm", {"channels": 2, "ϵ": 1e-3}),
            Layer("MeanPool", {"k": (2, 2), "stride": (1, 1)}),
        ),
    )
    text = tx.flux_julia(build_nnx(other, rngs=nnx.Rngs(0)))
    assert text.splitlines()[1] == (
        "model = Chain(ConvTranspose((3, 3), 4 => 2, tanh; stride=2, pad=(1, 0, 1, 0)), "
        "BatchNorm(2; eps=0.001f0), MeanPool((2, 2); stride=1))"
    )


def test_restore_mismatches_are_listed_by_file_path() -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    wrong = Layer("Chain", children=(Layer("Conv", {"kernel": (3, 3), "in": 1, "out": 6, "σ": "relu"}),
                                     *LENET.children[1:5], Layer("Dense", {"in": 256, "out": 100}),
                                     *LENET.children[6:]))  # fmt: skip
    with pytest.raises(tx.MismatchError) as err:
        tx.load(path, "lenet_state", like=build_equinox(wrong, key=KEY), layout=tx.flux_state)
    text = str(err.value)
    assert "lenet_state.layers[1].weight: shape (5, 5, 1, 6) in file, (3, 3, 1, 6) in template" in text
    assert "lenet_state.layers[6].weight: shape (120, 256) in file, (100, 256) in template" in text
    assert "lenet_state.layers[6].bias: shape (120,) in file, (100,) in template" in text


def test_equinox_lambda_ravel_is_flatten() -> None:
    seq = eqx.nn.Sequential(
        [eqx.nn.Conv1d(1, 2, 3, key=KEY), eqx.nn.Lambda(jnp.ravel), eqx.nn.Linear(6, 1, key=KEY)]
    )
    assert "Flux.flatten" in tx.flux_julia(seq)


def test_equinox_batch_mode_statistics_are_debiased_like_equinox_inference() -> None:
    # mode="batch" keeps zero-debiased running stats; Flux's μ/σ² are what Equinox's inference uses.
    bn = eqx.nn.BatchNorm(2, "batch", momentum=0.9, mode="batch", inference=True)
    model, state = eqx.nn.make_with_state(lambda: bn)()
    state = state.set(model.batch_counter, jnp.array(3))
    state = state.set(model.batch_state_index, (jnp.array([0.2, -0.4]), jnp.array([0.5, 0.8])))
    s = tx.flux_state((model, state))
    scale = 1 - 0.9**3
    np.testing.assert_allclose(s["μ"], np.array([0.2, -0.4]) / scale, rtol=1e-6)
    np.testing.assert_allclose(s["σ²"], np.array([0.5, 0.8]) / scale, rtol=1e-6)
    x = jnp.array([1.0, 2.0])
    want = np.asarray(model(x, state)[0])
    # restoring those Flux statistics (counter reset to 0) computes the same
    restored_model, restored_state = load_state((model, state), s)
    np.testing.assert_allclose(np.asarray(restored_model(x, restored_state)[0]), want, rtol=1e-5)
    assert int(restored_state.get(restored_model.batch_counter)) == 0


def test_flax_lambda_flatten_after_conv_is_refused_not_ported_silently() -> None:
    rngs = nnx.Rngs(0)
    model = nnx.Sequential(
        nnx.Conv(1, 2, (3, 3), padding="VALID", rngs=rngs),
        lambda x: x.reshape(x.shape[0], -1),  # channels-last order: not Flux's flatten
        nnx.Linear(8, 2, rngs=rngs),
    )
    with pytest.raises(tx.UnsupportedError, match="Flatten"):
        tx.flux_state(model)


def test_flux_0_14_layernorm_ported_exactly_with_its_own_module() -> None:
    from _flux_reference import forward

    layer = Layer("LayerNorm", {"size": (5,), "ϵ": 0.1})
    model = build_equinox(layer, key=KEY, flux="0.14")
    rng = np.random.default_rng(0)
    state = tx.flux_state(model, flux="0.14")
    state = tx.NamedTuple(
        (
            k,
            tx.NamedTuple((n, rng.standard_normal(5).astype(np.float32) if n != "σ" else ()) for n in v)
            if k == "diag"
            else v,
        )
        for k, v in state.items()
    )
    restored = load_state(model, state)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    got = np.asarray(jax.vmap(restored)(jnp.asarray(x.T))).T
    np.testing.assert_allclose(got, forward(layer, state, x, flux="0.14.25"), rtol=1e-5, atol=1e-6)
    assert tx.flux_julia(restored, flux="0.14").splitlines()[1] == "model = LayerNorm(5; ϵ=0.1f0)"
    with pytest.raises(tx.UnsupportedError, match=r"flux='0\.14'"):
        tx.flux_state(restored)  # Flux 0.15 computes √(σ² + ϵ²): no exact twin
