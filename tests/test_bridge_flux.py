"""Flux layouts of Equinox models (``flux_state`` / ``flux_julia``), without files."""

from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from treexchange import ConversionError, NamedTuple, UnsupportedError, flux_julia, flux_state, restore

KEY = jax.random.key(0)


def test_mlp_state_is_a_chain_of_dense_states() -> None:
    mlp = eqx.nn.MLP(3, 2, 8, depth=2, key=KEY)
    state = flux_state(mlp)
    assert list(state) == ["layers"] and isinstance(state.layers, tuple) and len(state.layers) == 3
    for layer, lin in zip(state.layers, mlp.layers):
        assert list(layer) == ["weight", "bias", "σ"] and layer["σ"] == ()
        assert isinstance(layer.weight, np.ndarray) and layer.weight.dtype == np.float32
        assert np.array_equal(layer.weight, np.asarray(lin.weight))  # (out, in): no transpose
        assert np.array_equal(layer.bias, np.asarray(lin.bias))
    assert [layer.weight.shape for layer in state.layers] == [(8, 3), (8, 8), (2, 8)]


def test_sequential_folds_elementwise_activations_and_keeps_other_functions_as_layers() -> None:
    k1, k2 = jax.random.split(KEY)
    seq = eqx.nn.Sequential(
        [
            eqx.nn.Linear(1, 16, key=k1),
            eqx.nn.Lambda(jax.nn.relu),  # folded: Dense(1 => 16, relu)
            eqx.nn.Linear(16, 5, key=k2),
            eqx.nn.Lambda(jax.nn.softmax),  # its own stateless layer
        ]
    )
    state = flux_state(seq)
    assert len(state.layers) == 3 and state.layers[2] == ()
    assert flux_julia(seq).splitlines()[1] == "model = Chain(Dense(1 => 16, relu), Dense(16 => 5), softmax)"


def test_linear_without_bias_writes_bias_false_like_flux() -> None:
    lin = eqx.nn.Linear(4, 3, use_bias=False, key=KEY)
    state = flux_state(lin)
    assert state.bias is False and state.weight.shape == (3, 4)
    assert flux_julia([lin, jnp.tanh]).splitlines()[1] == "model = Chain(Dense(4 => 3, tanh, bias=false))"


def test_plain_list_of_layers_and_activation_names() -> None:
    k = jax.random.split(KEY, 3)
    model = [eqx.nn.Linear(2, 4, key=k[0]), jax.nn.gelu, eqx.nn.Linear(4, 4, key=k[1]), jax.nn.sigmoid,
             eqx.nn.Linear(4, 1, key=k[2])]  # fmt: skip
    assert flux_julia(model, file="dir/w.jld2", name="state").splitlines() == [
        "using Flux, JLD2",
        "model = Chain(Dense(2 => 4, gelu), Dense(4 => 4, sigmoid), Dense(4 => 1))",
        'Flux.loadmodel!(model, JLD2.load("dir/w.jld2", "state"))',
    ]


def test_non_float32_models_convert_the_flux_model() -> None:
    # Flux builds Float32 layers; a float16 model's Julia twin needs |> f16 to match eltypes.
    mlp = eqx.nn.MLP(2, 1, 3, depth=1, dtype=jnp.float16, key=KEY)
    assert flux_julia(mlp).splitlines()[1].endswith(")) |> f16")
    assert not flux_julia(eqx.nn.MLP(2, 1, 3, depth=1, key=KEY)).splitlines()[1].endswith("f32")


def test_julia_strings_are_escaped() -> None:
    lin = eqx.nn.Linear(1, 1, key=KEY)
    assert 'JLD2.load("a\\"b\\$c.jld2", "model_state")' in flux_julia(lin, file='a"b$c.jld2')


def test_unknown_activation_has_no_julia_name_but_still_has_a_state() -> None:
    mlp = eqx.nn.MLP(2, 1, 3, depth=1, activation=lambda x: x * 2, key=KEY)
    assert len(flux_state(mlp).layers) == 2
    with pytest.raises(ConversionError, match="no Flux"):
        flux_julia(mlp)


# (each model built by its test, not at collection: every xdist worker collects every test, and
# building them compiled their initialisers in both)
@pytest.mark.parametrize(
    "make",
    [
        lambda: eqx.nn.Conv2d(1, 2, 3, stride=2, padding="SAME", key=KEY),  # split depends on input size
        lambda: eqx.nn.RMSNorm(3),
        lambda: eqx.nn.MLP(2, 1, 3, depth=3, scan=True, key=KEY),
        lambda: eqx.nn.Linear(2, "scalar", key=KEY),
        lambda: [eqx.nn.Linear(2, 2, key=KEY), object()],
    ],
    ids=["conv-same", "rmsnorm", "scan-mlp", "scalar-out", "object"],
)
def test_layers_without_a_flux_rule_are_refused(make: Callable[[], object]) -> None:
    model = make()
    with pytest.raises(UnsupportedError):
        flux_state(model)


def test_restore_through_flux_layout_checks_against_julia_paths() -> None:
    seq = eqx.nn.Sequential([eqx.nn.Linear(1, 16, key=KEY), eqx.nn.Lambda(jax.nn.relu),
                             eqx.nn.Linear(16, 5, key=KEY)])  # fmt: skip
    good = flux_state(seq)
    out = restore(good, seq, layout=flux_state)
    assert type(out) is eqx.nn.Sequential and type(out.layers[1]) is eqx.nn.Lambda
    bad = NamedTuple(layers=(good.layers[0], good.layers[1].replace(weight=np.zeros((5, 32), np.float32))))
    with pytest.raises(Exception) as err:
        restore(bad, seq, layout=flux_state, path=("model_state",))
    assert "model_state.layers[2].weight: shape (5, 32) in file, (5, 16) in template" in str(err.value)


@pytest.mark.parametrize("cls", [eqx.nn.Conv2d, eqx.nn.ConvTranspose2d], ids=["conv", "convtranspose"])
def test_valid_padding_is_zero_padding(cls: type) -> None:
    """Equinox's ``padding="VALID"`` is zero padding (for a ConvTranspose, of its equivalent Conv,
    as Flux's ``pad``): it ports as ``pad = 0``, the same Flux model and state as ``padding=0``
    (it was refused as a padding string)."""
    valid, zero = cls(2, 3, 3, stride=2, padding="VALID", key=KEY), cls(2, 3, 3, stride=2, padding=0, key=KEY)
    assert flux_julia(valid) == flux_julia(zero)
    a, b = flux_state(valid), flux_state(zero)
    np.testing.assert_array_equal(a.weight, b.weight)
    x = jax.random.normal(KEY, (2, 9, 9))
    np.testing.assert_array_equal(valid(x), zero(x))
