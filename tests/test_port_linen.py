"""The Flax linen target: ``(module, variables)`` both ways, for what the per-layer, round-trip and
acceptance tests (test_port_layers, test_port_roundtrip, test_port_lenet, test_port_from_flux) do
not cover: recurrent layers and attention, a hand-written model with BatchNorm, and the refusals."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import _flux_reference as ref
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _states import scaled

import treexchange as tx
from treexchange._port._arch import parse_architecture

nn = pytest.importorskip("flax.linen")


def _initialised(text: str, *example: Any, flux: str = "0.15") -> tuple[Any, Any]:
    from treexchange._port._linen import build_linen

    module, _ = build_linen(parse_architecture(text), flux=flux)
    return module, module.init(jax.random.key(0), *example)


RECURRENT = ["RNN(3 => 4)", "RNN(3 => 4, relu)", "LSTM(3 => 4)", "GRU(3 => 4)", "GRUv3(3 => 4)"]


@pytest.mark.parametrize("layer_text", RECURRENT)
@pytest.mark.parametrize("era", ["0.15", "0.14"])
def test_recurrent_both_directions(layer_text: str, era: str, tmp_path: Path) -> None:
    text = f"Chain({layer_text}, Dense(4 => 2))"
    layer = parse_architecture(text)
    x = np.random.default_rng(1).normal(size=(3, 5, 2)).astype(np.float32)  # Julia (in, L, B)

    def run(model: Any) -> np.ndarray:
        module, variables = model
        return np.asarray(module.apply(variables, jnp.asarray(x.transpose(2, 1, 0)))).transpose(2, 1, 0)

    model = _initialised(text, jnp.asarray(x.transpose(2, 1, 0)), flux=era)
    state = tx.flux_state(model, flux=era)
    assert ("state0" in state.layers[0].cell.keys()) == (era == "0.14")
    np.testing.assert_allclose(run(model), ref.forward(layer, state, x), rtol=1e-4, atol=1e-5)
    assert tx.flux_julia(model, flux=era).splitlines()[1] == f"model = {text}"
    julia = scaled(state, 2)
    path = tmp_path / "rnn.jld2"
    tx.save(path, model_state=julia)
    fresh = tx.load(path, "model_state", like=model, layout=functools.partial(tx.flux_state, flux=era))
    expected = ref.forward(layer, tx.load(path, "model_state"), x)
    np.testing.assert_allclose(run(fresh), expected, rtol=1e-4, atol=1e-5)
    built = tx.from_flux(path, "model_state", architecture=text, flux=era, target="linen")
    np.testing.assert_allclose(run(built), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "text",
    [
        "MultiHeadAttention(8; nheads=2, bias=true)",
        "MultiHeadAttention((4, 5, 5) => (6, 6) => 3; nheads=3)",
        "MultiHeadAttention((4, 5, 7) => (6, 6) => 3; nheads=2)",  # keys and values of their own sizes
    ],
)
def test_attention_both_directions(text: str, tmp_path: Path) -> None:
    layer = parse_architecture(text)
    a = layer.args
    rng = np.random.default_rng(3)
    q = rng.normal(size=(a["q_in"], 4, 2)).astype(np.float32)  # Julia (features, length, batch)
    k = rng.normal(size=(a["k_in"], 6, 2)).astype(np.float32)
    v = rng.normal(size=(a["v_in"], 6, 2)).astype(np.float32)
    flax_inputs = [jnp.asarray(t.transpose(2, 1, 0)) for t in (q, k, v)]

    def run(model: Any) -> np.ndarray:
        module, variables = model
        return np.asarray(module.apply(variables, *flax_inputs)).transpose(2, 1, 0)

    model = _initialised(text, *flax_inputs)
    state = tx.flux_state(model)
    assert state["v_proj"]["weight"].shape == (a["v_dim"], a["v_in"])
    expected, _ = ref.multi_head_attention(layer, state, (q, k, v))
    np.testing.assert_allclose(run(model), expected, rtol=1e-4, atol=1e-5)
    julia = scaled(state, 4)
    tx.save(tmp_path / "a.jld2", attention=julia)
    fresh = tx.load(tmp_path / "a.jld2", "attention", like=model, layout=tx.flux_state)
    expected, _ = ref.multi_head_attention(layer, julia, (q, k, v))
    np.testing.assert_allclose(run(fresh), expected, rtol=1e-4, atol=1e-5)
    built = tx.from_flux(tmp_path / "a.jld2", "attention", architecture=text, target="linen")
    np.testing.assert_allclose(run(built), expected, rtol=1e-4, atol=1e-5)


def test_attention_sizes_linen_cannot_hold_are_refused() -> None:
    from treexchange._port._linen import build_linen

    with pytest.raises(tx.UnsupportedError, match="qk_dim == v_dim"):
        build_linen(parse_architecture("MultiHeadAttention((4, 5, 6) => (8, 4) => 3; nheads=2)"))


def test_hand_written_model_with_batchnorm_both_directions(tmp_path: Path) -> None:
    """A linen CNN as its author writes it (partial pools, VALID padding, BatchNorm in inference
    mode): its Flux.state, the Julia text, and a Julia-side state restored into it, all against the
    numpy Flux reference; the running statistics travel in ``batch_stats``."""
    from treexchange._port._linen_layers import Flatten

    module = nn.Sequential(
        [
            nn.Conv(4, (3, 3), padding="VALID"),
            nn.BatchNorm(use_running_average=True, momentum=0.9, epsilon=1e-5),
            nn.relu,
            functools.partial(nn.avg_pool, window_shape=(2, 2), strides=(2, 2)),
            Flatten(),
            nn.Dense(3),
        ]
    )
    x = np.random.default_rng(0).normal(size=(2, 6, 6, 2)).astype(np.float32)  # Flax (B, H, W, C)
    variables = module.init(jax.random.key(0), jnp.asarray(x))
    assert "batch_stats" in variables
    model = (module, variables)
    text = tx.flux_julia(model).splitlines()[1].removeprefix("model = ")
    assert (
        text
        == "Chain(Conv((3, 3), 2 => 4), BatchNorm(4, relu), MeanPool((2, 2)), Flux.flatten, Dense(16 => 3))"
    )
    state = tx.flux_state(model)
    assert state.layers[1].momentum == pytest.approx(0.1)  # Flax keeps 1 - m
    julia = scaled(state, 5)
    julia_x = x.transpose(2, 1, 3, 0)  # Julia (W, H, C, B)
    tx.save(tmp_path / "cnn.jld2", cnn=julia)
    fresh_module, fresh_variables = tx.load(tmp_path / "cnn.jld2", "cnn", like=model, layout=tx.flux_state)
    np.testing.assert_array_equal(
        np.asarray(fresh_variables["batch_stats"]["layers_1"]["var"]), julia.layers[1]["σ²"]
    )
    got = np.asarray(fresh_module.apply(fresh_variables, jnp.asarray(x))).T
    expected = ref.forward(parse_architecture(text), julia, julia_x)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # Lux too, through the same reader: BatchNorm st = (running_mean, running_var, training)
    _, st = tx.lux_state(model)
    np.testing.assert_array_equal(
        st.layer_2.running_var, np.asarray(variables["batch_stats"]["layers_1"]["var"])
    )


def test_mismatches_are_listed_by_file_path(tmp_path: Path) -> None:
    model = _initialised("Chain(Dense(3 => 4, relu), Dense(4 => 2))", jnp.ones((1, 3)))
    other = _initialised("Chain(Dense(3 => 5, relu), Dense(5 => 2))", jnp.ones((1, 3)))
    tx.save(tmp_path / "m.jld2", model_state=tx.flux_state(other))
    with pytest.raises(tx.MismatchError) as err:
        tx.load(tmp_path / "m.jld2", "model_state", like=model, layout=tx.flux_state)
    assert "model_state.layers[1].weight" in str(err.value)
    assert "model_state.layers[2].weight" in str(err.value)


def test_refusals_name_the_problem() -> None:
    class Custom(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return nn.Dense(2)(x)

    module = nn.Sequential([nn.Dense(3), Custom()])
    variables = module.init(jax.random.key(0), jnp.ones((1, 2)))
    with pytest.raises(tx.UnsupportedError, match=r"Custom: a module with a __call__ of its own") as err:
        tx.flux_state((module, variables))
    assert err.value.path == ("layers_1",)
    with pytest.raises(TypeError, match=r"pass \(module, variables\)"):
        tx.flux_state(nn.Dense(3))
    same = nn.Sequential([nn.Conv(2, (3, 3), strides=2)])  # "SAME" with a stride: depends on the input
    with pytest.raises(tx.UnsupportedError, match="depends on the input size"):
        tx.flux_state((same, same.init(jax.random.key(0), jnp.ones((1, 5, 5, 1)))))
    with pytest.raises(tx.UnsupportedError, match="no variable 'kernel'"):
        tx.flux_state((nn.Sequential([nn.Dense(3)]), {"params": {}}))
    # a Dense fed by an unknown function of conv output (a channels-last reshape?) is refused
    reshape = nn.Sequential(
        [nn.Conv(2, (3, 3), padding="VALID"), lambda x: x.reshape(x.shape[0], -1), nn.Dense(2)]
    )
    variables = reshape.init(jax.random.key(0), jnp.ones((1, 5, 5, 1)))
    with pytest.raises(tx.UnsupportedError, match=r"_linen_layers\.Flatten"):
        tx.flux_state((reshape, variables))


@pytest.mark.parametrize(
    ("padding", "kernel", "dilation"),
    [("SAME", (3, 3), 1), ("SAME", (4, 3), 1), ("SAME_LOWER", (4, 2), 1), ("SAME", (3, 2), 2)],
)
@pytest.mark.parametrize("framework", ["linen", "nnx", "equinox"])
def test_same_padding_of_a_stride_1_conv_is_explicit_flux_padding(
    framework: str, padding: str, kernel: tuple[int, int], dilation: int
) -> None:
    """Flax's default ``padding="SAME"`` (stride 1) is a static pad ``d(k−1)`` split larger half last
    (``SAME_LOWER``: first): written as Flux's explicit ``pad`` and checked against the reference."""
    from flax import nnx

    x = np.random.default_rng(0).normal(size=(2, 7, 6, 2)).astype(np.float32)  # (B, H, W, C)
    if framework == "linen":
        module = nn.Sequential([nn.Conv(3, kernel, padding=padding, kernel_dilation=dilation)])
        model: Any = (module, module.init(jax.random.key(0), jnp.asarray(x)))
        y = np.asarray(module.apply(model[1], jnp.asarray(x)))
    elif framework == "equinox":
        import equinox as eqx

        conv = eqx.nn.Conv2d(2, 3, kernel, padding=padding, dilation=dilation, key=jax.random.key(0))
        model = eqx.nn.Sequential([conv])
        y = np.asarray(jax.vmap(model)(jnp.asarray(x.transpose(0, 3, 1, 2)))).transpose(0, 2, 3, 1)
    else:
        model = nnx.Sequential(
            nnx.Conv(2, 3, kernel, padding=padding, kernel_dilation=dilation, rngs=nnx.Rngs(0))
        )
        y = np.asarray(model(jnp.asarray(x)))
    text = tx.flux_julia(model).splitlines()[1].removeprefix("model = ")
    assert "pad=" in text
    expected = ref.forward(parse_architecture(text), tx.flux_state(model), x.transpose(2, 1, 3, 0))
    np.testing.assert_allclose(y.transpose(2, 1, 3, 0), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("padding", ["VALID", "SAME"])
def test_conv_transpose_string_padding_is_what_lax_pads(padding: str, tmp_path: Path) -> None:
    """Flax's ``ConvTranspose(padding="VALID")`` pads the dilated input by ``(k−1, max(k−1, s−1))``
    (``lax.conv_transpose``), not by zeros: it was written as ``pad = k−1`` (kernel 3, stride 1:
    ``pad=2``, output 3 long instead of 7). Every kernel, stride and dilation now ports to the
    same output; "SAME" ports too (it was refused)."""
    from flax import linen as lnn

    rng = np.random.default_rng(35)
    x = jnp.asarray(rng.standard_normal((2, 5, 3)), jnp.float32)
    for k, s, d in [(1, 1, 1), (2, 1, 2), (3, 1, 1), (3, 2, 1), (2, 2, 1), (4, 3, 2), (3, 3, 1)]:
        mod = lnn.Sequential(
            [lnn.ConvTranspose(2, (k,), strides=(s,), padding=padding, kernel_dilation=(d,))]
        )
        variables = mod.init(jax.random.key(k), x)
        text = tx.flux_julia((mod, variables)).splitlines()[1][len("model = ") :]
        tx.save(tmp_path / "t.jld2", model_state=tx.flux_state((mod, variables)))
        module, params = tx.from_flux(tmp_path / "t.jld2", "model_state", text, target="linen")
        want = mod.apply(variables, x)
        np.testing.assert_allclose(
            np.asarray(module.apply(params, x)), np.asarray(want), rtol=1e-6, atol=1e-6
        )
        if padding == "VALID" and (k, s, d) == (3, 1, 1):
            assert "pad" not in text and want.shape[1] == 7


def test_flax_options_that_change_the_function_are_refused() -> None:
    """A kernel ``mask`` (nnx and linen), an nnx ``LayerNorm`` over other axes than the last and an
    nnx ``BatchNorm(axis=1)`` were written as plain Flux layers (2 to 4 off; linen already refused
    the norms): refused, naming the option."""
    from flax import nnx

    rngs = nnx.Rngs(0)
    for model, match in (
        (nnx.Sequential(nnx.Conv(4, 2, (3, 3), mask=jnp.zeros((3, 3, 4, 2)), rngs=rngs)), "mask"),
        (nnx.Sequential(nnx.LayerNorm(4, reduction_axes=(1, 2, 3), rngs=rngs)), "reduction_axes"),
        (nnx.Sequential(nnx.BatchNorm(7, axis=1, rngs=rngs)), r"BatchNorm\(axis=1\).*write -1"),
        (nnx.Sequential(nnx.LayerNorm(4, reduction_axes=3, feature_axes=3, rngs=rngs)), "axis 3 is the last"),
    ):
        with pytest.raises(tx.UnsupportedError, match=match):
            tx.flux_state(model)
    # (an axis from the front is refused, naming -1; with -1 the same layer ports)
    linen_bn = nn.Sequential([nn.BatchNorm(use_running_average=True, axis=3)])
    with pytest.raises(tx.UnsupportedError, match="if axis 3 is the last of your data, write -1"):
        tx.flux_state((linen_bn, linen_bn.init(jax.random.key(0), jnp.ones((1, 5, 5, 4)))))
    masked = nn.Sequential([nn.Conv(2, (3, 3), mask=jnp.zeros((3, 3, 4, 2)))])
    with pytest.raises(tx.UnsupportedError, match="mask"):
        tx.flux_state((masked, masked.init(jax.random.key(0), jnp.ones((1, 5, 5, 4)))))
