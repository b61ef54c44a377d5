"""Flax nnx targets for Flux's recurrent layers and MultiHeadAttention, proved against the numpy
Flux reference (tests/_flux_reference.py) in both directions and through from_flux."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import _flux_reference as ref
import jax
import numpy as np
import pytest
from _states import scaled

import treexchange as tx
from treexchange._port._arch import parse_architecture

nnx = pytest.importorskip("flax.nnx")


def _run(model: Any, x_jl: np.ndarray) -> np.ndarray:
    """An nnx recurrent model on a Julia ``(in, L, B)`` sequence: Flax takes ``(B, L, in)``."""
    return np.asarray(model(jax.numpy.asarray(x_jl.transpose(2, 1, 0)))).transpose(2, 1, 0)


RECURRENT = ["RNN(3 => 4)", "RNN(3 => 4, relu)", "LSTM(3 => 4)", "GRU(3 => 4)", "GRUv3(3 => 4)"]


@pytest.mark.parametrize("layer_text", RECURRENT)
@pytest.mark.parametrize("era", ["0.15", "0.14"])
def test_recurrent_both_directions(layer_text: str, era: str, tmp_path: Path) -> None:
    from treexchange._port._nnx import build_nnx

    text = f"Chain({layer_text}, Dense(4 => 2))"
    layer = parse_architecture(text)
    model = build_nnx(layer, rngs=nnx.Rngs(0), flux=era)
    x = np.random.default_rng(1).normal(size=(3, 5, 2)).astype(np.float32)
    state = tx.flux_state(model, flux=era)
    cell = state.layers[0].cell
    assert ("state0" in cell.keys()) == (era == "0.14")
    assert ("Wh_h̃" in cell.keys()) == ("GRUv3" in text)
    np.testing.assert_allclose(_run(model, x), ref.forward(layer, state, x), rtol=1e-4, atol=1e-5)
    assert tx.flux_julia(model, flux=era).splitlines()[1] == f"model = {text}"
    # Julia -> Python: a state from elsewhere, through a file, into a fresh model and by from_flux.
    julia = scaled(state, 2)
    path = tmp_path / "rnn.jld2"
    tx.save(path, model_state=julia)
    layout = functools.partial(tx.flux_state, flux=era)
    fresh = tx.load(path, "model_state", like=build_nnx(layer, rngs=nnx.Rngs(7), flux=era), layout=layout)
    expected = ref.forward(layer, tx.load(path, "model_state"), x)
    np.testing.assert_allclose(_run(fresh, x), expected, rtol=1e-4, atol=1e-5)
    built = tx.from_flux(path, "model_state", architecture=text, flux=era, target="nnx")
    np.testing.assert_allclose(_run(built, x), expected, rtol=1e-4, atol=1e-5)


ATTENTION = [
    "MultiHeadAttention(8; nheads=2, bias=true)",
    "MultiHeadAttention((4, 5, 5) => (6, 6) => 3; nheads=3)",
]


@pytest.mark.parametrize("text", ATTENTION)
def test_attention_both_directions(text: str, tmp_path: Path) -> None:
    from treexchange._port._nnx import build_nnx

    layer = parse_architecture(text)
    a = layer.args
    model = build_nnx(layer, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(3)
    q = rng.normal(size=(a["q_in"], 4, 2)).astype(np.float32)  # Julia (features, length, batch)
    kv = rng.normal(size=(a["k_in"], 6, 2)).astype(np.float32)

    def run(m: Any) -> np.ndarray:
        t = (q.transpose(2, 1, 0), kv.transpose(2, 1, 0), kv.transpose(2, 1, 0))
        return np.asarray(m(*(jax.numpy.asarray(v) for v in t))).transpose(2, 1, 0)

    state = tx.flux_state(model)
    assert state["q_proj"]["weight"].shape == (a["qk_dim"], a["q_in"])
    expected, _ = ref.multi_head_attention(layer, state, (q, kv, kv))
    np.testing.assert_allclose(run(model), expected, rtol=1e-4, atol=1e-5)
    julia = scaled(state, 4)
    tx.save(tmp_path / "a.jld2", attention=julia)
    fresh = tx.load(
        tmp_path / "a.jld2", "attention", like=build_nnx(layer, rngs=nnx.Rngs(5)), layout=tx.flux_state
    )
    expected, _ = ref.multi_head_attention(layer, julia, (q, kv, kv))
    np.testing.assert_allclose(run(fresh), expected, rtol=1e-4, atol=1e-5)
    built = tx.from_flux(tmp_path / "a.jld2", "attention", architecture=text, target="nnx")
    np.testing.assert_allclose(run(built), expected, rtol=1e-4, atol=1e-5)


def test_attention_sizes_nnx_cannot_hold_are_refused() -> None:
    from treexchange._port._nnx import build_nnx

    layer = parse_architecture("MultiHeadAttention((4, 5, 6) => (8, 4) => 3; nheads=2)")
    with pytest.raises(tx.UnsupportedError, match="k_in == v_in"):
        build_nnx(layer, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("layer_text", ["LSTM(3 => 4)", "GRUv3(3 => 4)"])
def test_from_flux_of_a_0_14_recur_file_into_equinox(layer_text: str, tmp_path: Path) -> None:
    """from_flux(flux="0.14") restores a Recur state (``b``, ``state0``, ``state``) into Equinox too."""
    from treexchange._port._nnx import build_nnx

    text = f"Chain({layer_text})"
    layer = parse_architecture(text)
    state = scaled(tx.flux_state(build_nnx(layer, rngs=nnx.Rngs(0), flux="0.14"), flux="0.14"), 3)
    tx.save(tmp_path / "recur.jld2", model_state=state)
    built = tx.from_flux(tmp_path / "recur.jld2", "model_state", architecture=text, flux="0.14")
    x = np.random.default_rng(4).normal(size=(3, 5, 1)).astype(np.float32)
    out = np.asarray(built(jax.numpy.asarray(x[:, :, 0].T))).T[:, :, None]  # Equinox: one (L, in)
    np.testing.assert_allclose(out, ref.forward(layer, state, x), rtol=1e-4, atol=1e-5)
