"""MultiHeadAttention (docs/porting.md §Attention) between Flux and ``eqx.nn.MultiheadAttention``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import treexchange as tx
from tests._flux_reference import multi_head_attention
from treexchange._port._eqx import build_equinox
from treexchange._port._spec import Layer
from treexchange._values import NamedTuple


def _model(bias: bool, seed: int = 0, dim: int = 8, heads: int = 2) -> Any:
    layer = Layer("MultiHeadAttention", {"in": dim, "nheads": heads, "bias": bias})
    return build_equinox(layer, key=jax.random.key(seed))


def _reference(state: object, x: np.ndarray) -> np.ndarray:
    out, _ = multi_head_attention(Layer("MultiHeadAttention"), state, x.T[:, :, None])  # Julia (E, L, 1)
    return np.asarray(out[:, :, 0].T)


@pytest.mark.parametrize("bias", [False, True])
def test_flux_state_fields_and_numerics(bias: bool) -> None:
    """Python -> Julia: Flux's state, and the reference on it gives the Equinox outputs."""
    model = _model(bias, seed=1)
    state = tx.flux_state(model)
    assert list(state.keys()) == ["nheads", "q_proj", "k_proj", "v_proj", "attn_drop", "out_proj"]
    assert state["nheads"] == 2 and isinstance(state["nheads"], np.int64)
    assert list(state["q_proj"].keys()) == ["weight", "bias", "σ"]
    assert (state["q_proj"]["bias"] is False) is (not bias)
    assert list(state["attn_drop"].keys()) == ["p", "dims", "active", "rng"]
    x = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(model(x, x, x)), _reference(state, x), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("bias", [False, True])
def test_flux_state_file_restores_into_equinox(bias: bool, tmp_path: Path) -> None:
    """Julia -> Python: random Flux arrays saved, restored into a fresh model, compute the reference."""
    rng = np.random.default_rng(3)
    donor = tx.flux_state(_model(bias, seed=4))

    def randomised(value: object) -> object:
        if isinstance(value, NamedTuple):
            return NamedTuple((k, randomised(v)) for k, v in value.items())
        if isinstance(value, np.ndarray):
            return rng.standard_normal(value.shape).astype(np.float32)
        return value

    state = randomised(donor)
    path = tmp_path / "mha.jld2"
    tx.save(path, attention=state)
    restored = tx.load(path, "attention", like=_model(bias, seed=5), layout=tx.flux_state)
    x = np.random.default_rng(6).standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(restored(x, x, x)), _reference(state, x), rtol=2e-5, atol=2e-5)
    assert "MultiHeadAttention(8; nheads=2" in tx.flux_julia(restored)


SIZES = [
    "MultiHeadAttention(8; nheads=2, bias=true)",
    "MultiHeadAttention((4, 5, 6) => (8, 4) => 3; nheads=2, bias=true)",
    "MultiHeadAttention((6, 6, 6) => (12, 6) => 6; nheads=3)",
]


@pytest.mark.parametrize("text", SIZES)
def test_any_sizes_both_directions_and_from_flux(text: str, tmp_path: Path) -> None:
    """Flux's (q_in, k_in, v_in) => (qk_dim, v_dim) => out: Equinox computes the reference with the
    model's own Flux state and with a random Julia-side state restored into it, and from_flux builds
    it from the architecture text."""
    from treexchange._port._arch import parse_architecture

    layer = parse_architecture(text)
    model = build_equinox(layer, key=jax.random.key(0))
    a = layer.args
    rng = np.random.default_rng(1)
    q = rng.standard_normal((3, a["q_in"])).astype(np.float32)  # Python (length, features)
    k = rng.standard_normal((5, a["k_in"])).astype(np.float32)
    v = rng.standard_normal((5, a["v_in"])).astype(np.float32)

    def reference(state: object) -> np.ndarray:
        out, _ = multi_head_attention(layer, state, (q.T[:, :, None], k.T[:, :, None], v.T[:, :, None]))
        return np.asarray(out[:, :, 0].T)

    state = tx.flux_state(model)
    assert state["q_proj"]["weight"].shape == (a["qk_dim"], a["q_in"])
    assert state["out_proj"]["weight"].shape == (a["out"], a["v_dim"])
    np.testing.assert_allclose(np.asarray(model(q, k, v)), reference(state), rtol=2e-5, atol=2e-5)
    assert tx.flux_julia(model).splitlines()[1] == f"model = {text}"
    random_state = jax.tree_util.tree_map(
        lambda x: rng.standard_normal(x.shape).astype(np.float32) if isinstance(x, np.ndarray) else x, state
    )
    path = tmp_path / "mha.jld2"
    tx.save(path, attention=random_state)
    restored = tx.load(path, "attention", like=model, layout=tx.flux_state)
    np.testing.assert_allclose(np.asarray(restored(q, k, v)), reference(random_state), rtol=2e-5, atol=2e-5)
    built = tx.from_flux(path, "attention", architecture=text)
    np.testing.assert_allclose(np.asarray(built(q, k, v)), reference(random_state), rtol=2e-5, atol=2e-5)
