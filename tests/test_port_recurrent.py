"""Recurrent layers (RNN, LSTM, GRU, GRUv3) between Flux and Equinox, both eras.

The rules: docs/porting.md §Recurrent layers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

import treexchange as tx
from tests._flux_reference import recurrent
from treexchange._port._eqx import build_equinox
from treexchange._port._spec import Layer
from treexchange._values import NamedTuple

KINDS = ["RNN", "LSTM", "GRU", "GRUv3"]

CELL_FIELDS = {
    ("RNN", "0.15"): ["σ", "Wi", "Wh", "bias"],
    ("LSTM", "0.15"): ["Wi", "Wh", "bias"],
    ("GRU", "0.15"): ["Wi", "Wh", "b"],
    ("GRUv3", "0.15"): ["Wi", "Wh", "b", "Wh_h̃"],
    ("RNN", "0.14"): ["σ", "Wi", "Wh", "b", "state0"],
    ("LSTM", "0.14"): ["Wi", "Wh", "b", "state0"],
    ("GRU", "0.14"): ["Wi", "Wh", "b", "state0"],
    ("GRUv3", "0.14"): ["Wi", "Wh", "b", "Wh_h̃", "state0"],
}


def _model(kind: str, seed: int = 0, n_in: int = 3, hidden: int = 5) -> Any:
    return build_equinox(Layer(kind, {"in": n_in, "out": hidden}), key=jax.random.key(seed))


def _sequence(seed: int, n_in: int = 3, length: int = 7) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((length, n_in)).astype(np.float32)


@pytest.mark.parametrize("era", ["0.14", "0.15"])
@pytest.mark.parametrize("kind", KINDS)
def test_flux_state_fields_in_flux_order(kind: str, era: str) -> None:
    state = tx.flux_state(_model(kind), flux=era)
    assert list(state.keys()) == (["cell", "state"] if era == "0.14" else ["cell"])
    assert list(state["cell"].keys()) == CELL_FIELDS[(kind, era)]
    gates = {"RNN": 1, "LSTM": 4, "GRU": 3, "GRUv3": 3}[kind]
    assert state["cell"]["Wi"].shape == (gates * 5, 3)
    # (GRUv3's Wh: 2H rows in Flux ≤ 0.14, 3H from 0.15, which uses the first 2H)
    assert state["cell"]["Wh"].shape == ((2 if kind == "GRUv3" and era == "0.14" else gates) * 5, 5)
    if era == "0.14":
        zero = np.zeros((5, 1), np.float32)
        state0 = state["cell"]["state0"]
        for part in state0 if kind == "LSTM" else (state0,):
            np.testing.assert_array_equal(part, zero)


@pytest.mark.parametrize("era", ["0.14", "0.15"])
@pytest.mark.parametrize("kind", KINDS)
def test_equinox_model_computes_what_its_flux_state_computes(kind: str, era: str) -> None:
    """Python -> Julia: the Flux reference on flux_state(model) gives the model's outputs."""
    model = _model(kind, seed=1)
    xs = _sequence(2)
    expected = np.asarray(model(xs))  # (L, H)
    state = tx.flux_state(model, flux=era)
    julia_seq = xs.T[:, :, None]  # Julia (in, L, B=1)
    got = recurrent(Layer(kind, {"σ": "tanh"}), state, julia_seq)[:, :, 0].T
    np.testing.assert_allclose(expected, got, rtol=2e-5, atol=2e-5)


def _random_state(kind: str, seed: int, n_in: int = 3, hidden: int = 5) -> Any:
    """A 0.15 Flux.state with random arrays, as Julia would write it (through a donor model's form)."""
    rng = np.random.default_rng(seed)
    state = tx.flux_state(_model(kind, seed + 100, n_in, hidden), flux="0.15")
    cell = NamedTuple(
        (name, rng.standard_normal(v.shape).astype(np.float32) if isinstance(v, np.ndarray) else v)
        for name, v in state["cell"].items()
    )
    return NamedTuple([("cell", cell)])


@pytest.mark.parametrize("kind", KINDS)
def test_flux_state_file_restores_into_equinox(kind: str, tmp_path: Path) -> None:
    """Julia -> Python: a saved Flux ≥ 0.15 state restored into a fresh model computes the reference."""
    state = _random_state(kind, seed=3)
    path = tmp_path / "rnn.jld2"
    tx.save(path, model_state=state)
    restored = tx.load(path, "model_state", like=_model(kind, seed=9), layout=tx.flux_state)
    xs = _sequence(4)
    expected = recurrent(Layer(kind, {"σ": "tanh"}), state, xs.T[:, :, None])[:, :, 0].T
    np.testing.assert_allclose(np.asarray(restored(xs)), expected, rtol=2e-5, atol=2e-5)
    again = tx.flux_state(restored, flux="0.15")
    for name, value in state["cell"].items():
        if kind == "GRUv3" and name == "Wh":  # the block Flux 0.15 never reads comes back as zeros
            np.testing.assert_array_equal(again["cell"][name][:10], value[:10])
            np.testing.assert_array_equal(again["cell"][name][10:], 0)
        elif isinstance(value, np.ndarray):
            np.testing.assert_array_equal(again["cell"][name], value)


def test_gru_with_nonzero_bias_n_is_refused() -> None:
    import equinox as eqx

    cell = eqx.nn.GRUCell(3, 4, key=jax.random.key(0))  # Equinox initialises bias_n randomly
    with pytest.raises(tx.TreexchangeError, match="bias_n"):
        tx.flux_state(cell)


@pytest.mark.parametrize("kind", KINDS)
def test_from_flux_architecture_round_trip(kind: str, tmp_path: Path) -> None:
    """from_flux(architecture=flux_julia(m)) restored from flux_state(m) computes what m computes."""
    model = _model(kind, seed=5)
    script = tx.flux_julia(model)
    constructor = next(line for line in script.splitlines() if line.startswith("model = "))[len("model = ") :]
    assert constructor == f"{kind}(3 => 5)"
    path = tmp_path / "rec.jld2"
    tx.save(path, model_state=tx.flux_state(model))
    built = tx.from_flux(path, "model_state", architecture=constructor)
    xs = _sequence(6)
    np.testing.assert_allclose(np.asarray(built(xs)), np.asarray(model(xs)), rtol=1e-6, atol=1e-6)


def test_rnn_activation_is_kept() -> None:
    model = build_equinox(Layer("RNN", {"in": 2, "out": 3, "σ": "relu"}), key=jax.random.key(0))
    assert "RNN(2 => 3, relu)" in tx.flux_julia(model)
    xs = _sequence(7, n_in=2)
    expected = recurrent(Layer("RNN", {"σ": "relu"}), tx.flux_state(model), xs.T[:, :, None])[:, :, 0].T
    np.testing.assert_allclose(np.asarray(model(xs)), expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_flux_0_14_recur_file_restores_with_the_0_14_layout(kind: str, tmp_path: Path) -> None:
    """A Flux ≤ 0.14 ``Recur`` state (``b``, ``state0``, ``state``) restores through the 0.14 layout."""
    import functools

    donor = _model(kind, seed=11)
    state = tx.flux_state(donor, flux="0.14")
    path = tmp_path / "recur.jld2"
    tx.save(path, model_state=state)
    template = _model(kind, seed=12)
    with pytest.raises(tx.TreexchangeError, match="state0"):  # the default (0.15) layout lists it
        tx.load(path, "model_state", like=template, layout=tx.flux_state)
    layout = functools.partial(tx.flux_state, flux="0.14")
    restored = tx.load(path, "model_state", like=template, layout=layout)
    xs = _sequence(13)
    expected = recurrent(Layer(kind, {"σ": "tanh"}), state, xs.T[:, :, None])[:, :, 0].T
    np.testing.assert_allclose(np.asarray(restored(xs)), expected, rtol=2e-5, atol=2e-5)


def test_flux_0_15_gruv3_keeps_wh_of_three_blocks_and_uses_two(tmp_path: Path) -> None:
    """Flux ≥ 0.15's ``GRUv3Cell`` allocates ``Wh = init(out * 3, out)`` and its forward pass
    (``chunk(Wh * h, 3)``) uses the first two blocks only (Flux.jl v0.15.0 src/layers/recurrent.jl).
    A Flux 0.15 state (last block random, as Flux leaves it) ports to the numpy reference; the state
    written for Flux 0.15 has 3H rows (zeros after the two used, so ``Flux.loadmodel!`` takes it),
    for Flux 0.14 2H; a whole Flux 0.15 model and a flat vector of either era port the same."""
    rng = np.random.default_rng(7)
    h, n_in = 4, 3
    wi, wh, b, wht = (
        rng.standard_normal(s).astype(np.float32) for s in ((3 * h, n_in), (3 * h, h), (3 * h,), (h, h))
    )
    cell = NamedTuple(Wi=wi, Wh=wh, b=b, **{"Wh_h̃": wht})
    path = tmp_path / "gru.jld2"
    tx.save(path, state=NamedTuple(layers=(NamedTuple(cell=cell),)))
    text = "Chain(GRUv3(3 => 4))"
    model = tx.from_flux(path, "state", text)
    x = _sequence(3)
    want = recurrent(Layer("GRUv3", {"in": n_in, "out": h}), NamedTuple(cell=cell), x.T[:, :, None])
    np.testing.assert_allclose(np.asarray(model(x)), want[:, :, 0].T, rtol=1e-5, atol=1e-6)
    written = tx.flux_state(model, flux="0.15")["layers"][0]["cell"]["Wh"]
    np.testing.assert_array_equal(written[: 2 * h], wh[: 2 * h])
    np.testing.assert_array_equal(written[2 * h :], 0)
    assert tx.flux_state(model, flux="0.14")["layers"][0]["cell"]["Wh"].shape == (2 * h, h)
    gru = tx.JuliaStruct("Flux.GRUv3{Flux.GRUv3Cell}", {"cell": tx.JuliaStruct("Flux.GRUv3Cell", dict(cell))})
    flat_15 = np.concatenate([a.ravel(order="F") for a in (wi, wh, b, wht)])
    flat_14 = np.concatenate([a.ravel(order="F") for a in (wi, wh[: 2 * h], b, wht, np.zeros(h, np.float32))])
    tx.save(
        path,
        model=tx.JuliaStruct("Flux.Chain{Tuple{Flux.GRUv3}}", {"layers": (gru,)}),
        p15=flat_15,
        p14=flat_14,
    )
    for ported in (
        tx.from_flux(path, "model"),
        tx.from_flux(path, "p15", text),
        tx.from_flux(path, "p14", text),
    ):
        np.testing.assert_allclose(np.asarray(ported(x)), np.asarray(model(x)), rtol=0, atol=0)


_CELL_TYPES = {"RNN": "RNNCell", "LSTM": "LSTMCell", "GRU": "GRUCell", "GRUv3": "GRUv3Cell"}


def _bias_free_state(kind: str, era: str, seed: int) -> Any:
    """A Flux state of ``kind(3 => 5; bias=false)`` with random arrays: ``false`` where the bias was."""
    rng = np.random.default_rng(seed)
    state = tx.flux_state(_model(kind, seed), flux=era)
    bias = "bias" if era == "0.15" and kind in ("RNN", "LSTM") else "b"
    cell = NamedTuple(
        (name, False if name == bias else rng.standard_normal(v.shape).astype(np.float32))
        if isinstance(v, np.ndarray) or name == bias
        else (name, v)
        for name, v in state["cell"].items()
    )
    return NamedTuple((name, cell if name == "cell" else v) for name, v in state.items())


def _run(model: Any, target: str, xs: np.ndarray) -> np.ndarray:
    if target == "equinox":
        return np.asarray(model(xs))
    if target == "nnx":
        return np.asarray(model(xs[None]))[0]
    module, variables = model
    return np.asarray(module.apply(variables, xs[None]))[0]


@pytest.mark.parametrize("target", ["equinox", "nnx", "linen"])
@pytest.mark.parametrize("era", ["0.14", "0.15"])
@pytest.mark.parametrize("kind", KINDS)
def test_bias_false_ports_to_every_target(kind: str, era: str, target: str, tmp_path: Path) -> None:
    """Flux ≥ 0.15's ``RNN(3 => 5; bias=false)`` (``false`` in the state; Flux ≤ 0.14's
    ``loadmodel!`` reads it as a zero ``b``) ports without a bias and computes the reference."""
    state = _bias_free_state(kind, era, seed=21)
    path = tmp_path / "nobias.jld2"
    tx.save(path, state=NamedTuple(layers=(state,)))
    model = tx.from_flux(path, "state", f"Chain({kind}(3 => 5; bias=false))", target=target, flux=era)
    xs = _sequence(22)
    want = recurrent(Layer(kind, {"σ": "tanh"}), state, xs.T[:, :, None])[:, :, 0].T
    np.testing.assert_allclose(_run(model, target, xs), want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_bias_free_python_cells_write_false_and_bias_false(kind: str, tmp_path: Path) -> None:
    """Python -> Julia: a cell without bias is Flux's ``bias=false`` (``false`` in the state, the
    keyword in the 0.15 text; the 0.14 text has none: ``loadmodel!`` zeroes ``b``); the state, as
    a file, a whole model and a flat vector, ports back to the same function."""
    model = build_equinox(Layer(kind, {"in": 3, "out": 5, "bias": False}), key=jax.random.key(3))
    xs = _sequence(23)
    bias = "bias" if kind in ("RNN", "LSTM") else "b"
    state = tx.flux_state(model, flux="0.15")
    assert state["cell"][bias] is False
    assert tx.flux_state(model, flux="0.14")["cell"]["b"] is False
    assert f"{kind}(3 => 5; bias=false)" in tx.flux_julia(model, flux="0.15")
    assert f"model = {kind}(3 => 5)\n" in tx.flux_julia(model, flux="0.14")
    want = recurrent(Layer(kind, {"σ": "tanh"}), state, xs.T[:, :, None])[:, :, 0].T
    np.testing.assert_allclose(np.asarray(model(xs)), want, rtol=2e-5, atol=2e-5)
    params = "{NNlib.#tanh,A,B,Bool}" if kind == "RNN" else ""  # (RNNCell's 1st: its σ)
    cell = tx.JuliaStruct(f"Flux.{_CELL_TYPES[kind]}{params}", dict(state["cell"]))
    layers = {"layers": (tx.JuliaStruct(f"Flux.{kind}", {"cell": cell}),)}
    arrays = [v for v in state["cell"].values() if isinstance(v, np.ndarray)]
    path = tmp_path / "nobias.jld2"
    tx.save(
        path,
        state=NamedTuple(layers=(state,)),
        model=tx.JuliaStruct("Flux.Chain{Tuple}", layers),
        flat=np.concatenate([a.ravel(order="F") for a in arrays]),
    )
    text = f"Chain({kind}(3 => 5; bias=false))"
    for ported in (
        tx.from_flux(path, "state", text),
        tx.from_flux(path, "model"),
        tx.from_flux(path, "flat", text),
    ):
        np.testing.assert_allclose(np.asarray(ported(xs)), np.asarray(model(xs)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cell", ["RNNCell", "LSTMCell", "GRUCell"])
def test_lux_cells_without_bias_port_as_flux_bias_false(cell: str, tmp_path: Path) -> None:
    """Lux ≥ 1's ``use_bias=false`` cells (``ps`` = ``weight_ih``, ``weight_hh``) compute Flux's
    ``bias=false`` equations; a GRU without bias has no ``b_hn`` in the reset product either."""
    kind = cell[: -len("Cell")]
    rng = np.random.default_rng(24)
    gates = {"RNN": 1, "LSTM": 4, "GRU": 3}[kind]
    wi = rng.standard_normal((gates * 5, 3)).astype(np.float32)
    wh = rng.standard_normal((gates * 5, 5)).astype(np.float32)
    path = tmp_path / "lux.jld2"
    ps = NamedTuple(layer_1=NamedTuple(weight_ih=wi, weight_hh=wh))
    tx.save(path, ps=ps, st=NamedTuple(layer_1=NamedTuple()))
    text = f"Chain(Recurrence({cell}(3 => 5; use_bias=false); return_sequence=true))"
    xs = _sequence(25)
    flux_cell = NamedTuple(Wi=wi, Wh=wh, b=False)
    want = recurrent(Layer(kind, {"σ": "tanh"}), NamedTuple(cell=flux_cell), xs.T[:, :, None])[:, :, 0].T
    for target in ("equinox", "nnx", "linen"):
        model = tx.from_lux(path, architecture=text, target=target)
        np.testing.assert_allclose(_run(model, target, xs), want, rtol=2e-5, atol=2e-5)
    written, _ = tx.lux_state(tx.from_lux(path, architecture=text))
    assert list(written["layer_1"]) == ["weight_ih", "weight_hh"]
    with pytest.raises(tx.UnsupportedError, match=r"Lux 0\.5"):
        tx.lux_state(tx.from_lux(path, architecture=text), lux="0.5")


@pytest.mark.parametrize("kind", KINDS)
def test_a_flux_0_15_whole_model_ports_in_its_own_era(kind: str, tmp_path: Path) -> None:
    """A whole Flux ≥ 0.15 model (``LSTM`` holding its cell, no ``Recur``; RNN/LSTM name the bias
    ``bias``) is read in the era its structs show: it was a mismatch against Flux 0.14's ``b`` and
    ``state0`` unless ``flux="0.15"`` was passed."""
    state = _random_state(kind, seed=26)
    params = "{NNlib.#tanh,A,B,C}" if kind == "RNN" else ""
    cell = tx.JuliaStruct(f"Flux.{_CELL_TYPES[kind]}{params}", dict(state["cell"]))
    layer = tx.JuliaStruct(f"Flux.{kind}{{C}}", {"cell": cell})
    path = tmp_path / "whole15.jld2"
    tx.save(path, model=tx.JuliaStruct("Flux.Chain{Tuple}", {"layers": (layer,)}))
    xs = _sequence(27)
    want = recurrent(Layer(kind, {"σ": "tanh"}), state, xs.T[:, :, None])[:, :, 0].T
    for ported in (tx.from_flux(path, "model"), tx.from_flux(path, "model", flux="0.15")):
        np.testing.assert_allclose(np.asarray(ported(xs)), want, rtol=2e-5, atol=2e-5)


def _last_state(kind: str, state: Any, xs: np.ndarray) -> Any:
    """Flux's last state after the sequence ``xs`` ``(L, in)``: ``h``, or ``(h, c)`` for LSTM."""
    from tests._flux_reference import rnn_cell_step

    hidden = state["cell"]["Wh"].shape[1]
    carry: Any = np.zeros((hidden, 1))
    carry = (carry, carry) if kind == "LSTM" else carry
    for x in xs:
        _, carry = rnn_cell_step(kind, state["cell"], "tanh", x[:, None].astype(np.float64), carry)
    return tuple(c[:, 0] for c in carry) if kind == "LSTM" else carry[:, 0]


@pytest.mark.parametrize("target", ["equinox", "nnx", "linen"])
@pytest.mark.parametrize("kind", KINDS)
def test_return_state_gives_the_outputs_and_the_last_state(kind: str, target: str, tmp_path: Path) -> None:
    """Flux ≥ 0.15's ``return_state=true`` (``scan``'s ``(outputs, last state)``; a whole model's
    ``LSTM{true, …}``) ports as the pair, every target; the text says it again (Flux ≤ 0.14's
    ``Recur`` cannot: refused for that era). It was parsed and dropped: the port returned the
    outputs alone."""
    state = _random_state(kind, seed=28)
    params = "{NNlib.#tanh,A,B,C}" if kind == "RNN" else ""
    cell = tx.JuliaStruct(f"Flux.{_CELL_TYPES[kind]}{params}", dict(state["cell"]))
    whole = tx.JuliaStruct(
        "Flux.Chain{Tuple}", {"layers": (tx.JuliaStruct(f"Flux.{kind}{{true,C}}", {"cell": cell}),)}
    )
    path = tmp_path / "returning.jld2"
    tx.save(path, state=NamedTuple(layers=(state,)), model=whole)
    xs = _sequence(29)
    want = recurrent(Layer(kind, {"σ": "tanh"}), state, xs.T[:, :, None])[:, :, 0].T
    last = _last_state(kind, state, xs)
    text = f"Chain({kind}(3 => 5; return_state=true))"
    for ported in (
        tx.from_flux(path, "state", text, target=target),
        tx.from_flux(path, "model", target=target),
    ):
        batch = target != "equinox"
        out = ported[0].apply(ported[1], xs[None]) if target == "linen" else ported(xs[None] if batch else xs)
        hs, got = out
        np.testing.assert_allclose(np.asarray(hs).reshape(want.shape), want, rtol=2e-5, atol=2e-5)
        for g, w in zip(got if kind == "LSTM" else (got,), last if kind == "LSTM" else (last,)):
            np.testing.assert_allclose(np.asarray(g).reshape(w.shape), w, rtol=2e-5, atol=2e-5)
    model = tx.from_flux(path, "state", text)
    assert f"model = {text}" in tx.flux_julia(model)
    with pytest.raises(tx.UnsupportedError, match="return_state"):
        tx.flux_julia(model, flux="0.14")


@pytest.mark.parametrize("kind", KINDS)
def test_flux_recurrence_of_a_cell_is_the_layer(kind: str, tmp_path: Path) -> None:
    """Flux ≥ 0.16's ``Recurrence(LSTMCell(3 => 5))`` is ``LSTM(3 => 5)`` (the cell scanned over
    the sequence, state ``(cell = …,)``): its text and its whole model port as the layer."""
    state = _random_state(kind, seed=30)
    params = "{NNlib.#tanh,A,B,C}" if kind == "RNN" else ""
    cell = tx.JuliaStruct(f"Flux.{_CELL_TYPES[kind]}{params}", dict(state["cell"]))
    layer = tx.JuliaStruct("Flux.Recurrence{false,C}", {"cell": cell})
    path = tmp_path / "recurrence.jld2"
    tx.save(
        path,
        state=NamedTuple(layers=(state,)),
        model=tx.JuliaStruct("Flux.Chain{Tuple}", {"layers": (layer,)}),
    )
    xs = _sequence(31)
    want = recurrent(Layer(kind, {"σ": "tanh"}), state, xs.T[:, :, None])[:, :, 0].T
    text = f"Chain(Recurrence({_CELL_TYPES[kind]}(3 => 5)))"
    for ported in (tx.from_flux(path, "state", text), tx.from_flux(path, "model")):
        np.testing.assert_allclose(np.asarray(ported(xs)), want, rtol=2e-5, atol=2e-5)
    with pytest.raises(tx.ConversionError, match="Recurrence must wrap"):
        tx.from_flux(path, "state", "Chain(Recurrence(Dense(3 => 5)))")


@pytest.mark.parametrize("kind", KINDS)
def test_layers_after_a_recurrent_layer_take_its_sequence_in_equinox(kind: str, tmp_path: Path) -> None:
    """``Chain(LSTM(3 => 5), Dense(5 => 2))``: Flux's Dense acts on the LSTM's ``(H, L)`` output
    column by column; the Equinox port (one sequence ``(L, in)``) does the same, where
    ``eqx.nn.Linear`` refused the 2-d input (a Flux 0.12 BSON of two GRUs and a Dense could not be
    called). The nnx port agrees; the model's Flux.state round-trips; a vector is refused by name."""
    rng = np.random.default_rng(32)
    state = _random_state(kind, seed=32)
    w = rng.standard_normal((2, 5)).astype(np.float32)
    b = rng.standard_normal(2).astype(np.float32)
    dense = NamedTuple(weight=w, bias=b, σ=())
    path = tmp_path / "seq.jld2"
    tx.save(path, state=NamedTuple(layers=(state, dense)))
    text = f"Chain({kind}(3 => 5), Dense(5 => 2, tanh))"
    xs = _sequence(33)
    hs = recurrent(Layer(kind, {"σ": "tanh"}), state, xs.T[:, :, None])[:, :, 0]  # (H, L)
    want = np.tanh(w @ hs + b[:, None]).T  # (L, 2)
    model = tx.from_flux(path, "state", text)
    np.testing.assert_allclose(np.asarray(model(xs)), want, rtol=2e-5, atol=2e-5)
    nnx_model = tx.from_flux(path, "state", text, target="nnx")
    np.testing.assert_allclose(np.asarray(nnx_model(xs[None]))[0], want, rtol=2e-5, atol=2e-5)
    again = tx.flux_state(model)
    np.testing.assert_array_equal(again["layers"][1]["weight"], w)
    with pytest.raises(ValueError, match="one sequence"):
        model(xs[0])
