"""``tx.lux_state``: Equinox models <-> Lux ``(ps, st)``, v1 and v0.5, both directions.

The acceptance case is a real Lux file (``lux/eikonet_model.jld2``: a Dense chain with
SkipConnections), restored into an Equinox model and run against a numpy Lux forward pass written
from Lux's definitions (``Dense``: ``σ.(W * x .+ b)``; ``SkipConnection(layers, +)``:
``layers(x) + x``; ``Chain``: left to right). The synthetic cases save a Conv + BatchNorm +
CrossCor chain with ``tx.save`` and restore it; the numpy reference convolves as NNlib does (true
convolution for Lux ``Conv``, none flipped for ``cross_correlation=true``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _flux_reference import conv
from conftest import BUNDLED, FIXTURES, NOT_BUNDLED_REASON, SKIP_REASON, require_fixture

import treexchange as tx
from treexchange._port._eqx import build_equinox
from treexchange._port._spec import Layer

EIKONET = FIXTURES / "lux" / "eikonet_model.jld2"


def _rev(a: np.ndarray) -> np.ndarray:
    return a.transpose(tuple(range(a.ndim))[::-1])


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))  # NNlib elu, α = 1


# --- the real Lux file ------------------------------------------------------------------------------


def _eikonet_equinox(key: Any) -> eqx.nn.Sequential:
    """EikoNet's Lux chain in Equinox; ``layer_1`` (its own ``CylindricalSymmetry`` feature map,
    13 -> 4, no parameters) is an Identity here: the test feeds its 4 output features directly."""
    keys = iter(jax.random.split(key, 20))
    elu = eqx.nn.Lambda(jax.nn.elu)

    def block() -> Any:
        inner = eqx.nn.Sequential(
            [eqx.nn.Linear(16, 32, key=next(keys)), elu, eqx.nn.Linear(32, 16, key=next(keys)), elu]
        )
        return tx_skip(inner)

    return eqx.nn.Sequential(
        [
            eqx.nn.Identity(),
            eqx.nn.Linear(4, 16, key=next(keys)),
            elu,
            *(block() for _ in range(6)),
            eqx.nn.Linear(16, 1, key=next(keys)),
            eqx.nn.Lambda(jax.nn.relu),
        ]
    )


def tx_skip(inner: Any) -> Any:
    from treexchange._port._eqx_layers import SkipConnection

    return SkipConnection(inner, "+")


def _lux_dense(p: Any, x: np.ndarray, act: Any) -> np.ndarray:
    w = np.asarray(p.weight, np.float64)
    b = np.asarray(p.bias, np.float64).reshape(w.shape[0], 1)  # (out, 1) in Lux 0.5, (out,) in v1
    return act(w @ x + b)


def _eikonet_lux_forward(ps: Any, x: np.ndarray) -> np.ndarray:
    """Lux's forward of layers 2..9 of the file's chain on a Julia batch ``x`` of shape (4, N)."""
    h = _lux_dense(ps.layer_2, x, _elu)
    for i in range(3, 9):  # SkipConnection(Chain(Dense(16 => 32, elu), Dense(32 => 16, elu)), +)
        inner = getattr(ps, f"layer_{i}")
        h = _lux_dense(inner.layer_2, _lux_dense(inner.layer_1, h, _elu), _elu) + h
    return _lux_dense(ps.layer_9, h, lambda v: np.maximum(v, 0))


@pytest.mark.skipif(not EIKONET.is_file(), reason=NOT_BUNDLED_REASON if BUNDLED else SKIP_REASON)
def test_real_lux_eikonet_restores_into_equinox_and_computes_what_lux_computes() -> None:
    model_info = tx.load(EIKONET, "model")
    lux_types = str(model_info)
    assert "SkipConnection" in lux_types and "elu" in lux_types  # the architecture the test assumes
    template = _eikonet_equinox(jax.random.key(0))
    layout = functools.partial(tx.lux_state, lux="0.5", part="ps")
    model = tx.load(EIKONET, "ps", like=template, layout=layout)
    ps = tx.load(EIKONET, "ps")
    # every array went in (the template's own random weights would not match)
    np.testing.assert_array_equal(np.asarray(model.layers[1].weight), ps.layer_2.weight)
    assert ps.layer_2.bias.shape == (16, 1)  # Lux 0.5 Dense bias
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    got = _rev(np.asarray(jax.vmap(model)(jnp.asarray(_rev(x)))))
    want = _eikonet_lux_forward(ps, x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.abs(want).max() > 0  # not a vacuous comparison of zeros
    # Python -> Lux: the restored model's ps is the file's ps, array for array
    again = tx.lux_state(model, lux="0.5", part="ps")
    for i in (2, 9):
        np.testing.assert_array_equal(getattr(again, f"layer_{i}").bias, getattr(ps, f"layer_{i}").bias)
    np.testing.assert_array_equal(again.layer_5.layer_1.weight, ps.layer_5.layer_1.weight)


def test_lux_v1_layout_rejects_a_v05_file_naming_the_bias() -> None:
    if EIKONET.is_file():
        template = _eikonet_equinox(jax.random.key(0))
        with pytest.raises(tx.MismatchError, match="bias"):
            tx.load(EIKONET, "ps", like=template, layout=functools.partial(tx.lux_state, part="ps"))
        return
    # Without EikoNet: the Dense of the bundled Lux 0.5.23 tutorial's ps (its bias (1, 1)), as the ps of
    # a one-layer chain; Lux 0.5's layout takes it, Lux 1's (bias (1,)) names the bias.
    ps = tx.load(require_fixture("lux/lux-docs_v0.5.23_trained_model.jld2"), "ps_trained")
    tree = tx.NamedTuple(layer_1=ps.classifier)
    template = eqx.nn.Sequential([eqx.nn.Linear(8, 1, key=jax.random.key(0))])
    with pytest.raises(tx.MismatchError, match=r"layer_1\.bias: shape \(1, 1\) in file, \(1,\) in template"):
        tx.restore(tree, template, layout=functools.partial(tx.lux_state, part="ps"))
    model = tx.restore(tree, template, layout=functools.partial(tx.lux_state, lux="0.5", part="ps"))
    np.testing.assert_array_equal(np.asarray(model.layers[0].weight), ps.classifier.weight)
    np.testing.assert_array_equal(np.asarray(model.layers[0].bias), ps.classifier.bias.reshape(-1))


# --- synthetic Conv + BatchNorm chains ------------------------------------------------------------

CNN = Layer(
    "Chain",
    children=(
        Layer("Conv", {"kernel": (3, 3), "in": 2, "out": 4}),
        Layer("BatchNorm", {"channels": 4, "σ": "relu"}),
        Layer("CrossCor", {"kernel": (2, 2), "in": 4, "out": 3, "σ": "tanh"}),
        Layer("flatten"),
        Layer("Dense", {"in": 27, "out": 5}),
    ),
)


def _random_cnn(seed: int) -> tuple[Any, Any]:
    model = build_equinox(CNN, key=jax.random.key(seed))
    like = (model, eqx.nn.State(model))
    ps, st = tx.lux_state(like)
    rng = np.random.default_rng(seed)

    def rand(tree: Any, positive: bool = False) -> Any:
        return tx.NamedTuple(
            (k, rand(v, positive or k == "running_var"))
            if isinstance(v, tx.NamedTuple)
            else (
                k,
                (
                    rng.uniform(0.5, 1.5, v.shape)
                    if positive or k == "running_var"
                    else rng.standard_normal(v.shape)
                ).astype(np.float32)
                if isinstance(v, np.ndarray)
                else v,
            )
            for k, v in tree.items()
        )

    ps, st = rand(ps), rand(st)
    model, state = tx.restore(ps, like=like, layout=functools.partial(tx.lux_state, part="ps"))
    model, state = tx.restore(st, like=(model, state), layout=functools.partial(tx.lux_state, part="st"))
    return (model, state), (ps, st)


def _run(like: Any, x: np.ndarray) -> np.ndarray:
    model, state = like
    y = jax.vmap(lambda xi: model(xi, state)[0])(jnp.asarray(_rev(x)))
    return _rev(np.asarray(y))


def _lux_cnn_forward(ps: Any, st: Any, x: np.ndarray) -> np.ndarray:
    """Lux: Conv (true convolution), BatchNorm in test mode then relu, Conv(cross_correlation=true)
    then tanh, FlattenLayer (column-major), Dense."""
    c1, bn, c2, dense = ps.layer_1, ps.layer_2, ps.layer_3, ps.layer_5
    h = conv(x, c1.weight) + np.asarray(c1.bias).reshape(1, 1, -1, 1)
    s = st.layer_2
    m, v = (np.asarray(a).reshape(1, 1, -1, 1) for a in (s.running_mean, s.running_var))
    h = (h - m) / np.sqrt(v + 1e-5) * np.asarray(bn.scale).reshape(1, 1, -1, 1)
    h = np.maximum(h + np.asarray(bn.bias).reshape(1, 1, -1, 1), 0)
    h = np.tanh(conv(h, c2.weight, flipped=True) + np.asarray(c2.bias).reshape(1, 1, -1, 1))
    flat = h.reshape(-1, h.shape[-1], order="F")
    return np.asarray(dense.weight) @ flat + np.asarray(dense.bias).reshape(-1, 1)


@pytest.mark.parametrize("lux", ["1", "0.5"])
def test_conv_batchnorm_chain_round_trips_through_a_saved_lux_file(lux: str, tmp_path: Path) -> None:
    like, (ps1, st1) = _random_cnn(3)
    x = np.random.default_rng(1).standard_normal((6, 6, 2, 5)).astype(np.float32)
    want = _lux_cnn_forward(ps1, st1, x.astype(np.float64))
    np.testing.assert_allclose(_run(like, x), want, rtol=1e-4, atol=1e-4)

    ps, st = tx.lux_state(like, lux=lux)
    bias_shape = {"1": (4,), "0.5": (1, 1, 4, 1)}[lux]
    assert ps.layer_1.bias.shape == bias_shape
    assert ps.layer_5.bias.shape == {"1": (5,), "0.5": (5, 1)}[lux]
    assert list(ps.layer_2) == ["scale", "bias"]
    assert list(st.layer_2) == ["running_mean", "running_var", "training"]
    assert st.layer_1 == tx.NamedTuple() and ps.layer_4 == tx.NamedTuple()
    path = tmp_path / f"cnn_lux{lux}.jld2"
    tx.save(path, ps=ps, st=st)

    fresh_model = build_equinox(CNN, key=jax.random.key(99))
    fresh = (fresh_model, eqx.nn.State(fresh_model))
    assert not np.allclose(_run(fresh, x), want, atol=1e-3)
    got = tx.load(path, "ps", like=fresh, layout=functools.partial(tx.lux_state, lux=lux, part="ps"))
    got = tx.load(path, "st", like=got, layout=functools.partial(tx.lux_state, lux=lux, part="st"))
    np.testing.assert_allclose(_run(got, x), want, rtol=1e-4, atol=1e-4)
    # the Lux kernels are the Flux kernels: Conv flipped against Equinox, CrossCor not
    w_eqx = np.asarray(got[0].layers[0].weight)
    np.testing.assert_array_equal(_rev(ps.layer_1.weight), w_eqx[:, :, ::-1, ::-1])


def test_lux_state_rejects_unknown_versions_and_parts() -> None:
    lin = eqx.nn.Linear(2, 3, key=jax.random.key(0))
    with pytest.raises(ValueError, match="lux"):
        tx.lux_state(lin, lux="0.4")
    with pytest.raises(ValueError, match="part"):
        tx.lux_state(lin, part="both")


def test_layernorm_embedding_and_parallel_take_their_lux_places(tmp_path: Path) -> None:
    arch = Layer(
        "Chain",
        children=(
            Layer("LayerNorm", {"size": (5,)}),
            Layer(
                "Parallel",
                {"connection": "vcat"},
                (Layer("Dense", {"in": 5, "out": 2}), Layer("Dense", {"in": 5, "out": 3, "σ": "relu"})),
            ),
        ),
    )
    model = build_equinox(arch, key=jax.random.key(0))
    ps, st = tx.lux_state(model, lux="0.5")
    assert list(ps.layer_1) == ["bias", "scale"]  # Lux LayerNorm: bias first
    assert ps.layer_1.scale.shape == (5, 1)
    assert list(ps.layer_2) == ["layer_1", "layer_2"] and ps.layer_2.layer_2.bias.shape == (3, 1)
    assert st == tx.NamedTuple(
        layer_1=tx.NamedTuple(), layer_2=tx.NamedTuple(layer_1=tx.NamedTuple(), layer_2=tx.NamedTuple())
    )
    rng = np.random.default_rng(0)
    ps = tx.NamedTuple(
        layer_1=tx.NamedTuple(
            bias=rng.standard_normal((5, 1)).astype(np.float32),
            scale=rng.standard_normal((5, 1)).astype(np.float32),
        ),
        layer_2=ps.layer_2,
    )
    path = tmp_path / "ln.jld2"
    tx.save(path, ps=ps)
    fresh = build_equinox(arch, key=jax.random.key(5))
    got = tx.load(path, "ps", like=fresh, layout=functools.partial(tx.lux_state, lux="0.5", part="ps"))
    again = tx.lux_state(got, lux="0.5", part="ps")
    np.testing.assert_array_equal(again.layer_1.bias, ps.layer_1.bias)
    np.testing.assert_array_equal(again.layer_1.scale, ps.layer_1.scale)
    np.testing.assert_array_equal(again.layer_2.layer_1.weight, ps.layer_2.layer_1.weight)

    emb = build_equinox(Layer("Embedding", {"in": 10, "out": 4}), key=jax.random.key(0))
    eps, est = tx.lux_state(emb)
    assert eps.weight.shape == (4, 10) and est == tx.NamedTuple()  # (dim, vocab), as Flux
    np.testing.assert_array_equal(_rev(eps.weight), np.asarray(emb.weight))


def test_flax_nnx_model_gives_the_same_lux_ps_as_its_flux_state() -> None:
    from flax import nnx

    from treexchange._port._nnx import build_nnx

    model = build_nnx(CNN, rngs=nnx.Rngs(0))
    ps, st = tx.lux_state(model, lux="0.5")
    flux = tx.flux_state(model)
    np.testing.assert_array_equal(ps.layer_1.weight, flux.layers[0].weight)  # Lux Conv kernel = Flux's
    np.testing.assert_array_equal(ps.layer_3.weight, flux.layers[2].weight)  # cross_correlation=true
    np.testing.assert_array_equal(ps.layer_1.bias.reshape(-1), flux.layers[0].bias)
    np.testing.assert_array_equal(st.layer_2.running_var, flux.layers[1]["σ²"])
    np.testing.assert_array_equal(ps.layer_5.weight, flux.layers[4].weight)
