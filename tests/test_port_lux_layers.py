"""Lux ps/st for GroupNorm, recurrent cells and MultiHeadAttention.

The rules: docs/porting.md §Norms, §Recurrent layers, §Attention.

Proved by numbers: a Lux v1 LSTM forward pass written from Lux's equations (PyTorch-like: two
biases) on the ps we write computes what the Equinox model computes, and files of ps restore into
fresh models that then compute what the source model computes.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import treexchange as tx
from treexchange._port._arch import parse_architecture
from treexchange._port._eqx import build_equinox


def _model(text: str, seed: int) -> Any:
    return build_equinox(parse_architecture(text), key=jax.random.key(seed))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _lux_v1_lstm(ps: Any, xs: np.ndarray) -> np.ndarray:
    """Lux ≥ 1 ``Recurrence(LSTMCell(in => H); return_sequence=true)`` on one sequence ``(L, in)``:
    gates i, f, g, o of ``W_ih x + b_ih + W_hh h + b_hh``, zero initial state."""
    hidden = ps.weight_hh.shape[1]
    h, c = np.zeros(hidden), np.zeros(hidden)
    out = []
    for x in xs.astype(np.float64):
        z = ps.weight_ih @ x + ps.bias_ih + ps.weight_hh @ h + ps.bias_hh
        i, f, g, o = np.split(z, 4)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.stack(out)


def test_lux_v1_lstm_ps_compute_what_the_model_computes() -> None:
    model = _model("Chain(LSTM(3 => 4))", 0)
    ps, _ = tx.lux_state(model)
    cell = ps.layer_1
    assert list(cell.keys()) == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]
    assert not cell.bias_hh.any() and cell.bias_ih.shape == (16,)
    xs = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(model(xs)), _lux_v1_lstm(cell, xs), rtol=1e-5, atol=1e-6)


def _lux_v1_rnn(ps: Any, xs: np.ndarray) -> np.ndarray:
    """Lux ≥ 1 ``RNNCell(in => H, tanh)``: ``h' = tanh(W_ih x + b_ih + W_hh h + b_hh)``."""
    h = np.zeros(ps.weight_hh.shape[1])
    out = []
    for x in xs.astype(np.float64):
        h = np.tanh(ps.weight_ih @ x + ps.bias_ih + ps.weight_hh @ h + ps.bias_hh)
        out.append(h)
    return np.stack(out)


@pytest.mark.parametrize(
    ("text", "forward"), [("Chain(LSTM(3 => 4))", _lux_v1_lstm), ("Chain(RNN(3 => 4))", _lux_v1_rnn)]
)
def test_lux_v1_recurrent_ps_with_two_biases_restore(text: str, forward: Any, tmp_path: Path) -> None:
    """Lux 1 trains both biases; Flux has one: the restore places their sum (exact, both are added
    to the same pre-activations), and the model computes what Lux's equations compute."""
    ps, _ = tx.lux_state(_model(text, 0))
    rng = np.random.default_rng(3)
    cell = tx.NamedTuple(
        (k, (v + rng.normal(size=v.shape)).astype(v.dtype) if k.startswith("bias") else v)
        for k, v in ps.layer_1.items()
    )
    assert cell.bias_hh.any()
    tx.save(tmp_path / "ps.jld2", ps=tx.NamedTuple(layer_1=cell))
    layout = functools.partial(tx.lux_state, part="ps")
    fresh = tx.load(tmp_path / "ps.jld2", "ps", like=_model(text, 1), layout=layout)
    xs = rng.normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(fresh(xs)), forward(cell, xs), rtol=1e-5, atol=1e-6)
    # a file missing one of the two biases is a mismatch naming it, not a half restore
    tx.save(
        tmp_path / "half.jld2",
        ps=tx.NamedTuple(layer_1=tx.NamedTuple((k, v) for k, v in cell.items() if k != "bias_hh")),
    )
    with pytest.raises(tx.MismatchError, match=r"ps.layer_1.bias_hh"):
        tx.load(tmp_path / "half.jld2", "ps", like=_model(text, 1), layout=layout)


def _lux_v05_gru(ps: Any, xs: np.ndarray) -> np.ndarray:
    """Lux 0.5 ``GRUCell`` (its docstring and ``(gru::GRUCell)(...)``, v0.5.68): ``r, z`` from
    ``W_i x + W_h h + bias_h``, ``n = tanh(W_in x + bias_i + r ⊙ (W_hn h + b_hn))``."""
    hidden = ps.weight_h.shape[1]
    h = np.zeros(hidden)
    out = []
    for x in xs.astype(np.float64):
        gx = np.split(ps.weight_i @ x, 3)
        gh = np.split(ps.weight_h @ h + ps.bias_h[:, 0], 3)
        r = _sigmoid(gx[0] + gh[0])
        z = _sigmoid(gx[1] + gh[1])
        n = np.tanh(gx[2] + r * gh[2] + ps.bias_i[:, 0])
        h = (1 - z) * n + z * h
        out.append(h)
    return np.stack(out)


def test_lux_v05_gru_ps_compute_what_the_model_computes() -> None:
    model = _model("Chain(GRU(3 => 4))", 0)
    state = tx.flux_state(model)
    rng = np.random.default_rng(5)
    state = jax.tree_util.tree_map(  # every array random (the biases non-zero), so their places are tested
        lambda a: (
            rng.normal(size=a.shape).astype(a.dtype)
            if isinstance(a, np.ndarray) and a.dtype.kind == "f"
            else a
        ),
        state,
    )
    model = tx.restore(state, like=model, layout=tx.flux_state)
    ps, _ = tx.lux_state(model, lux="0.5")
    cell = ps.layer_1
    assert list(cell.keys()) == ["weight_i", "weight_h", "bias_i", "bias_h"]
    assert cell.bias_i.shape == (4, 1) and cell.bias_h.shape == (12, 1) and not cell.bias_h[8:].any()
    xs = rng.normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(model(xs)), _lux_v05_gru(cell, xs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("lux", ["1", "0.5"])
def test_lux_gru_restore_is_refused_not_guessed(lux: str, tmp_path: Path) -> None:
    ps, _ = tx.lux_state(_model("Chain(GRU(3 => 4))", 0), lux=lux)
    tx.save(tmp_path / "ps.jld2", ps=ps)
    layout = functools.partial(tx.lux_state, part="ps", lux=lux)
    with pytest.raises(tx.UnsupportedError, match="inside the reset product"):
        tx.load(tmp_path / "ps.jld2", "ps", like=_model("Chain(GRU(3 => 4))", 1), layout=layout)


@pytest.mark.parametrize(
    ("text", "lux", "x_shape"),
    [
        ("Chain(Conv((3, 3), 2 => 4), GroupNorm(4, 2), Flux.flatten)", "1", (2, 6, 6)),
        ("Chain(Conv((3, 3), 2 => 4), GroupNorm(4, 2), Flux.flatten)", "0.5", (2, 6, 6)),
        ("Chain(LSTM(3 => 4))", "0.5", (5, 3)),
        ("Chain(RNN(3 => 4))", "0.5", (5, 3)),
        ("MultiHeadAttention((4, 5, 6) => (8, 4) => 3; nheads=2, bias=true)", "1", None),
    ],
)
def test_ps_files_restore_into_fresh_models(text: str, lux: str, x_shape: Any, tmp_path: Path) -> None:
    source = _model(text, 0)
    ps, st = tx.lux_state(source, lux=lux)
    tx.save(tmp_path / "lux.jld2", ps=ps, st=st)
    layout = functools.partial(tx.lux_state, part="ps", lux=lux)
    fresh = tx.load(tmp_path / "lux.jld2", "ps", like=_model(text, 7), layout=layout)
    rng = np.random.default_rng(2)
    if x_shape is None:  # attention: query (3, 4), keys (6, 5) and values (6, 6), (length, features)
        args: tuple[np.ndarray, ...] = tuple(
            rng.normal(size=shape).astype(np.float32) for shape in ((3, 4), (6, 5), (6, 6))
        )
    else:
        args = (rng.normal(size=x_shape).astype(np.float32),)
    np.testing.assert_array_equal(np.asarray(fresh(*args)), np.asarray(source(*args)))


def test_lux_v05_has_no_attention_and_no_gruv3() -> None:
    with pytest.raises(tx.UnsupportedError, match=r"v0\.5 has no MultiHeadAttention"):
        tx.lux_state(_model("MultiHeadAttention(8; nheads=2)", 0), lux="0.5")
    with pytest.raises(tx.UnsupportedError, match="GRUv3"):
        tx.lux_state(_model("Chain(GRUv3(3 => 4))", 0))


def _lux_v05_rnn(ps: Any, xs: np.ndarray) -> np.ndarray:
    """Lux 0.5 ``RNNCell`` (v0.5.68 ``(rnn::RNNCell)(...)``): ``tanh(W_ih x + W_hh h + bias)``,
    the bias added as stored (``fused_dense_bias_activation`` takes a vector bias)."""
    h = np.zeros(ps.weight_hh.shape[1])
    out = []
    for x in xs.astype(np.float64):
        h = np.tanh(ps.weight_ih @ x + ps.weight_hh @ h + ps.bias)
        out.append(h)
    return np.stack(out)


def _lux_v05_lstm(ps: Any, xs: np.ndarray) -> np.ndarray:
    """Lux 0.5 ``LSTMCell``: gates i, f, g, o of ``W_i x + W_h h + vec(bias)`` (``safe_vec``)."""
    hidden = ps.weight_h.shape[1]
    h, c = np.zeros(hidden), np.zeros(hidden)
    out = []
    for x in xs.astype(np.float64):
        i, f, g, o = np.split(ps.weight_i @ x + ps.weight_h @ h + ps.bias.reshape(-1), 4)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.stack(out)


@pytest.mark.parametrize(
    ("text", "forward", "bias_shape"),
    [("Chain(RNN(3 => 4))", _lux_v05_rnn, (4,)), ("Chain(LSTM(3 => 4))", _lux_v05_lstm, (16, 1))],
)
def test_lux_v05_recurrent_ps_compute_what_the_model_computes(
    text: str, forward: Any, bias_shape: tuple[int, ...], tmp_path: Path
) -> None:
    """Lux 0.5 makes an RNNCell bias ``init_bias(rng, H)`` (a vector) and an LSTMCell bias a ``vcat``
    of ``(H, 1)`` blocks; an RNN bias written ``(H, 1)`` is not the array Lux 0.5 adds."""
    model = _model(text, 0)
    rng = np.random.default_rng(8)
    state = jax.tree_util.tree_map(  # the bias non-zero, so its place and shape are tested
        lambda a: rng.normal(size=a.shape).astype(a.dtype) if isinstance(a, np.ndarray) else a,
        tx.flux_state(model),
    )
    model = tx.restore(state, like=model, layout=tx.flux_state)
    ps, _ = tx.lux_state(model, lux="0.5")
    assert ps.layer_1.bias.shape == bias_shape
    xs = rng.normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(model(xs)), forward(ps.layer_1, xs), rtol=1e-5, atol=1e-6)
    tx.save(tmp_path / "ps.jld2", ps=ps)  # and the file restores into a fresh model
    layout = functools.partial(tx.lux_state, part="ps", lux="0.5")
    fresh = tx.load(tmp_path / "ps.jld2", "ps", like=_model(text, 1), layout=layout)
    np.testing.assert_allclose(np.asarray(fresh(xs)), forward(ps.layer_1, xs), rtol=1e-5, atol=1e-6)


def _with_learnt_initial_state(text: str, seed: int) -> Any:
    """An Equinox model of ``text`` whose recurrent layers start from a learnt, non-zero initial state
    (a Flux ≤ 0.14 ``Recur.state0``, carried by ``from_flux``), every array random."""
    layer = parse_architecture(text)
    children = tuple(
        dataclasses.replace(c, args={**c.args, "state0": True}) if c.kind in ("RNN", "LSTM", "GRU") else c
        for c in layer.children
    )
    model = build_equinox(dataclasses.replace(layer, children=children), key=jax.random.key(seed))
    rng = np.random.default_rng(seed)
    layout = functools.partial(tx.flux_state, flux="0.14")
    state = jax.tree_util.tree_map(
        lambda a: rng.normal(size=a.shape).astype(a.dtype) if isinstance(a, np.ndarray) else a, layout(model)
    )
    return tx.restore(state, like=model, layout=layout)


def _lux_rnn(ps: Any, xs: np.ndarray) -> np.ndarray:
    """Lux ``RNNCell(in => H, tanh; train_state=true)`` (0.5: one ``bias``; 1: ``bias_ih + bias_hh``),
    starting from ``ps.hidden_state`` (Lux's ``init_trainable_rnn_hidden_state``)."""
    bias = ps.bias if "bias" in ps else ps.bias_ih + ps.bias_hh
    h = np.asarray(ps.hidden_state, np.float64)
    out = []
    for x in xs.astype(np.float64):
        h = np.tanh(ps.weight_ih @ x + ps.weight_hh @ h + bias)
        out.append(h)
    return np.stack(out)


def _lux_lstm(ps: Any, xs: np.ndarray) -> np.ndarray:
    """Lux ``LSTMCell(in => H; train_state=true, train_memory=true)``: gates i, f, g, o, starting
    from ``ps.hidden_state`` and ``ps.memory``."""
    w_i, w_h = (ps.weight_i, ps.weight_h) if "weight_i" in ps else (ps.weight_ih, ps.weight_hh)
    bias = ps.bias.reshape(-1) if "bias" in ps else ps.bias_ih + ps.bias_hh
    h, c = np.asarray(ps.hidden_state, np.float64), np.asarray(ps.memory, np.float64)
    out = []
    for x in xs.astype(np.float64):
        i, f, g, o = np.split(w_i @ x + w_h @ h + bias, 4)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        out.append(h)
    return np.stack(out)


@pytest.mark.parametrize("lux", ["1", "0.5"])
@pytest.mark.parametrize(
    ("text", "forward"), [("Chain(RNN(3 => 4))", _lux_rnn), ("Chain(LSTM(3 => 4))", _lux_lstm)]
)
def test_a_learnt_initial_state_is_lux_hidden_state_and_memory(
    text: str, forward: Any, lux: str, tmp_path: Path
) -> None:
    """A learnt initial state was dropped from the Lux ps without a word (the Lux model then started
    from zeros): it is Lux's ``train_state=true`` ``hidden_state`` (and ``train_memory=true``
    ``memory``), ``(H,)``, after the biases; Lux's equations from it compute the model's numbers, and
    the ps file restores the initial state into a fresh model."""
    model = _with_learnt_initial_state(text, 0)
    state0 = model.layers[0].state0
    ps, _ = tx.lux_state(model, lux=lux)
    cell = ps.layer_1
    lstm = "LSTM" in text
    assert list(cell.keys())[-2 if lstm else -1 :] == (
        ["hidden_state", "memory"] if lstm else ["hidden_state"]
    )
    np.testing.assert_array_equal(cell.hidden_state, np.asarray(state0[0] if lstm else state0))
    if lstm:
        np.testing.assert_array_equal(cell.memory, np.asarray(state0[1]))
    assert cell.hidden_state.shape == (4,) and np.abs(cell.hidden_state).min() > 0
    xs = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(model(xs)), forward(cell, xs), rtol=1e-5, atol=1e-6)
    tx.save(tmp_path / "ps.jld2", ps=ps)
    layout = functools.partial(tx.lux_state, part="ps", lux=lux)
    fresh = tx.load(tmp_path / "ps.jld2", "ps", like=_with_learnt_initial_state(text, 1), layout=layout)
    np.testing.assert_array_equal(np.asarray(fresh(xs)), np.asarray(model(xs)))


def test_a_learnt_initial_state_of_a_lux_05_gru_is_written() -> None:
    ps, _ = tx.lux_state(_with_learnt_initial_state("Chain(GRU(3 => 4))", 0), lux="0.5")
    assert list(ps.layer_1.keys()) == ["weight_i", "weight_h", "bias_i", "bias_h", "hidden_state"]
    assert ps.layer_1.hidden_state.shape == (4,)


@pytest.mark.parametrize("target", ["nnx", "linen"])
def test_a_learnt_initial_state_of_a_flax_model_is_lux_hidden_state(target: str, tmp_path: Path) -> None:
    """The Flax ports hold the learnt initial state too (from a Flux 0.14 file): Lux gets it."""
    model = _with_learnt_initial_state("Chain(LSTM(3 => 4), RNN(4 => 2))", 2)
    state = tx.flux_state(model, flux="0.14")
    tx.save(tmp_path / "s.jld2", s=state)
    built = tx.from_flux(
        tmp_path / "s.jld2", "s", architecture="Chain(LSTM(3 => 4), RNN(4 => 2))", target=target
    )
    for lux in ("1", "0.5"):
        ps, _ = tx.lux_state(built, lux=lux)
        (h, c), h2 = state["layers"][0]["cell"]["state0"], state["layers"][1]["cell"]["state0"]
        np.testing.assert_array_equal(ps.layer_1.hidden_state, h.ravel())
        np.testing.assert_array_equal(ps.layer_1.memory, c.ravel())
        np.testing.assert_array_equal(ps.layer_2.hidden_state, h2.ravel())
