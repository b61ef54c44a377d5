"""A bare Flux ≥ 0.15 recurrent cell (``GRUCell(3 => 5)`` alone: one step, the state carried by the
caller, as rash0402/crlEPH-dlc's predictor runs its ``GRUCell``) ported to every target.

Each target's cell is checked against ``_flux_reference.bare_cell`` (numpy, Flux's equations, float64)
on random weights, a random batch and a random non-zero state, in Flux's call ``cell(x, h)``:

- Equinox: the cell itself (``eqx.nn.GRUCell``, ``eqx.nn.LSTMCell``, ``_eqx_layers.RNNCell``,
  ``_eqx_layers.GRUv3Cell``), ``cell(x, h) -> h'`` (LSTM ``(h, c) -> (h', c')``) on one sample;
- Flax nnx / linen: ``_nnx_layers.Cell`` / ``_linen_layers.Cell``, Flax's ``cell(carry, x) -> (carry',
  y)`` on a batch, the LSTM carry ``(h, c)`` in Flux's order;
- PyTorch: ``torch.nn.RNNCell``/``LSTMCell``/``GRUCell`` loaded from the exported state_dict,
  ``cell(x, h) -> h'`` (LSTM ``(h, c) -> (h', c')``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _flux_reference as ref
import jax
import numpy as np
import pytest

import treexchange as tx
from treexchange._port._arch import parse_architecture

CELLS = ["RNNCell", "LSTMCell", "GRUCell", "GRUv3Cell"]
GATES = {"RNNCell": 1, "LSTMCell": 4, "GRUCell": 3, "GRUv3Cell": 3}
N_IN, HIDDEN, BATCH = 3, 5, 4
TOL = {"rtol": 1e-5, "atol": 1e-5}  # (float32 against float64)


def _text(kind: str, bias: bool = True, sigma: str | None = None) -> str:
    σ = f", {sigma}" if sigma else ""
    return f"{kind}({N_IN} => {HIDDEN}{σ}{'' if bias else '; bias=false'})"


def _cell_state(kind: str, seed: int, bias: bool = True) -> tx.NamedTuple:
    """``Flux.state`` of a Flux ≥ 0.15 cell (its struct's fields, written out here, not by the
    rules under test), weights of the size of trained ones. GRUv3Cell's ``Wh`` has the 3H rows Flux
    0.15 allocates, the unused last H random too (the port must not read them)."""
    rng = np.random.default_rng(seed)

    def arr(*shape: int) -> np.ndarray:
        return (rng.normal(size=shape) * 0.6).astype(np.float32)

    rows = GATES[kind] * HIDDEN
    b: Any = arr(rows) if bias else False
    fields: list[tuple[str, Any]] = [("σ", ())] if kind == "RNNCell" else []
    fields += [("Wi", arr(rows, N_IN)), ("Wh", arr(rows, HIDDEN))]
    fields.append(("bias" if kind in ("RNNCell", "LSTMCell") else "b", b))
    if kind == "GRUv3Cell":
        fields.append(("Wh_h̃", arr(HIDDEN, HIDDEN)))
    return tx.NamedTuple(fields)


def _inputs(kind: str, seed: int) -> tuple[np.ndarray, Any]:
    """A Julia batch ``x`` ``(in, B)`` and a non-zero state ``h`` ``(H, B)`` (LSTM ``(h, c)``)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N_IN, BATCH)).astype(np.float32)
    h = rng.normal(size=(HIDDEN, BATCH)).astype(np.float32) * 0.8
    c = rng.normal(size=(HIDDEN, BATCH)).astype(np.float32) * 0.8
    return x, ((h, c) if kind == "LSTMCell" else h)


def _py(state: Any) -> Any:
    """A Julia state ``(H, B)`` (LSTM ``(h, c)``) as the Python batch ``(B, H)``."""
    return (
        tuple(np.ascontiguousarray(s.T) for s in state)
        if isinstance(state, tuple)
        else np.ascontiguousarray(state.T)
    )


def _expected(kind: str, text: str, state: Any, x: np.ndarray, h: Any) -> tuple[np.ndarray, Any]:
    y, new = ref.bare_cell(parse_architecture(text), state, x, h)
    return y.T, _py(new)


def _port(tmp_path: Path, text: str, state: Any, target: str) -> Any:
    path = tmp_path / "cell.jld2"
    tx.save(path, cell_state=state)
    return tx.from_flux(path, "cell_state", architecture=text, target=target)


def _max_diff(got: Any, want: Any) -> float:
    pairs = zip(got, want, strict=True) if isinstance(want, tuple) else [(got, want)]
    return max(float(np.abs(np.asarray(g, np.float64) - w).max()) for g, w in pairs)


def _run(model: Any, target: str, kind: str, x: np.ndarray, h: Any) -> tuple[Any, Any]:
    """``(new state, output)`` of a ported cell, on the Python batch, in each target's own call."""
    carry, xs = _py(h), np.ascontiguousarray(x.T)
    if target == "equinox":  # one sample: cell(x, h) -> h' (LSTM (h', c')), vmapped over the batch
        new = jax.vmap(model)(xs, carry)
        return new, new[0] if kind == "LSTMCell" else new
    if target == "nnx":
        return model(carry, xs)
    module, variables = model
    return module.apply(variables, carry, xs)


CASES = [(kind, bias) for kind in CELLS for bias in (True, False)]


@pytest.mark.parametrize("target", ["equinox", "nnx", "linen"])
@pytest.mark.parametrize(("kind", "bias"), CASES, ids=[f"{k}-{'bias' if b else 'nobias'}" for k, b in CASES])
def test_the_ported_cell_computes_what_fluxs_cell_does(
    kind: str, bias: bool, target: str, tmp_path: Path
) -> None:
    text = _text(kind, bias)
    state = _cell_state(kind, seed=len(kind) + bias, bias=bias)
    model = _port(tmp_path, text, state, target)
    x, h = _inputs(kind, seed=7)
    y_want, new_want = _expected(kind, text, state, x, h)
    new, y = _run(model, target, kind, x, h)
    assert _max_diff(new, new_want) < TOL["atol"], (kind, target)
    np.testing.assert_allclose(np.asarray(y), y_want, **TOL)
    # (the state flows: from zeros the step is another one)
    zero = tuple(np.zeros_like(s) for s in h) if isinstance(h, tuple) else np.zeros_like(h)
    assert _max_diff(_run(model, target, kind, x, zero)[0], new_want) > 1e-2


@pytest.mark.parametrize("target", ["equinox", "nnx", "linen"])
def test_an_rnn_cells_activation_is_kept(target: str, tmp_path: Path) -> None:
    text = _text("RNNCell", sigma="relu")
    state = _cell_state("RNNCell", seed=3)
    model = _port(tmp_path, text, state, target)
    x, h = _inputs("RNNCell", seed=4)
    new, _ = _run(model, target, "RNNCell", x, h)
    np.testing.assert_allclose(np.asarray(new), _expected("RNNCell", text, state, x, h)[1], **TOL)


@pytest.mark.parametrize(("kind", "swap"), [("LSTMCell", (0, 1)), ("GRUCell", (0, 1)), ("GRUv3Cell", (1, 2))])
def test_a_gate_order_other_than_fluxs_is_seen(kind: str, swap: tuple[int, int], tmp_path: Path) -> None:
    """The check can fail: two gate blocks of Wi and b exchanged (what a port in another library's
    gate order would do) give another step, far outside the tolerance."""
    text, state = _text(kind), _cell_state(kind, seed=11)
    x, h = _inputs(kind, seed=12)
    _, new_want = _expected(kind, text, state, x, h)
    i, j = swap

    def swapped(a: np.ndarray) -> np.ndarray:
        blocks = np.split(a, GATES[kind])
        blocks[i], blocks[j] = blocks[j], blocks[i]
        return np.concatenate(blocks)

    bias_key = "bias" if kind == "LSTMCell" else "b"
    wrong = tx.NamedTuple((k, swapped(v) if k in ("Wi", bias_key) else v) for k, v in state.items())
    new, _ = _run(_port(tmp_path, text, wrong, "equinox"), "equinox", kind, x, h)
    assert _max_diff(new, new_want) > 1e-2


@pytest.mark.parametrize("kind", CELLS)
def test_a_ported_cell_writes_back_its_flux_state_and_text(kind: str, tmp_path: Path) -> None:
    state = _cell_state(kind, seed=5)
    for target in ("equinox", "nnx", "linen"):
        model = _port(tmp_path, _text(kind), state, target)
        assert tx.flux_julia(model).count(f"model = {_text(kind)}") == 1, target
        again = tx.flux_state(model)
        assert list(again) == list(state), target
        for name, value in state.items():
            if kind == "GRUv3Cell" and name == "Wh":  # (the block Flux 0.15 never reads: zeros)
                np.testing.assert_array_equal(again[name][: 2 * HIDDEN], value[: 2 * HIDDEN])
                np.testing.assert_array_equal(again[name][2 * HIDDEN :], 0)
            elif isinstance(value, np.ndarray):
                np.testing.assert_array_equal(again[name], value)


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
def test_flax_scans_the_ported_cell_as_the_layer_does(kind: str, tmp_path: Path) -> None:
    """The nnx cell is a Flax cell (``nnx.RNN(cell)`` scans it from its ``initialize_carry``, Flux's
    zeros): over a sequence it is the wrapped layer (``GRU(3 => 5)``) with the same arrays."""
    from flax import nnx

    state = _cell_state(kind, seed=9)
    cell = _port(tmp_path, _text(kind), state, "nnx")
    layer = _port(tmp_path, _text(kind).replace("Cell", ""), tx.NamedTuple(cell=state), "nnx")
    xs = np.random.default_rng(10).normal(size=(BATCH, 6, N_IN)).astype(np.float32)
    np.testing.assert_allclose(np.asarray(nnx.RNN(cell)(xs)), np.asarray(layer(xs)), rtol=1e-6, atol=1e-6)


def _crleph_predictor(cell: tx.NamedTuple, *, fields: dict[str, Any] | None = None) -> tx.NamedTuple:
    """rash0402/crlEPH-dlc's ``config/predictor_model.jld2`` (not bundled): a NamedTuple ``(d1 =
    Dense, c = GRUCell, d2 = Dense)`` of Flux 0.16 structs, the GRUCell run by the author's loop."""
    f32 = "Core.Array{Core.Float32,2},Core.Array{Core.Float32,1}"
    rng = np.random.default_rng(0)

    def dense(n_in: int, n_out: int) -> tx.JuliaStruct:
        w, b = rng.normal(size=(n_out, n_in)).astype(np.float32), np.zeros(n_out, np.float32)
        return tx.JuliaStruct(f"Flux.Dense{{NNlib.#relu,{f32}}}", {"weight": w, "bias": b, "σ": ()})

    struct = tx.JuliaStruct(
        "Flux.GRUCell{Core.Array{Core.Float32,2},Core.Array{Core.Float32,2},Core.Array{Core.Float32,1}}",
        fields if fields is not None else {k: v for k, v in cell.items()},
    )
    return tx.NamedTuple(d1=dense(7, N_IN), c=struct, d2=dense(HIDDEN, 2))


def test_a_whole_model_files_bare_cell_ports_by_its_path(tmp_path: Path) -> None:
    state = _cell_state("GRUCell", seed=13)
    path = tmp_path / "predictor_model.jld2"
    tx.save(path, predictor=_crleph_predictor(state))
    x, h = _inputs("GRUCell", seed=14)
    _, new_want = _expected("GRUCell", _text("GRUCell"), state, x, h)
    for target in ("equinox", "nnx", "linen"):
        model = tx.from_flux(path, ("predictor", "c"), target=target)
        new, _ = _run(model, target, "GRUCell", x, h)
        assert _max_diff(new, new_want) < TOL["atol"], target
    assert tx.values_equal(tx.flux_state(tx.from_flux(path, ("predictor", "c"))), state)


def test_a_flux_0_14_cell_outside_its_recur_is_refused(tmp_path: Path) -> None:
    """Flux ≤ 0.14's cell is called ``cell(h, x) -> (h', y)`` and holds ``state0``; no file in the
    corpus holds one outside its ``Recur`` (and in a Chain it cannot run): refused, saying why."""
    state = _cell_state("GRUCell", seed=1)
    old = {**{k: v for k, v in state.items()}, "state0": np.zeros((HIDDEN, 1), np.float32)}
    path = tmp_path / "old.jld2"
    tx.save(path, predictor=_crleph_predictor(state, fields=old))
    with pytest.raises(tx.ConversionError, match=r"Flux ≤ 0.14 cell \(cell\(h, x\).*Recur\(GRUCell"):
        tx.from_flux(path, ("predictor", "c"))
    model = _port(tmp_path, _text("GRUCell"), state, "equinox")
    with pytest.raises(tx.UnsupportedError, match=r"Flux ≥ 0\.15 only"):
        tx.flux_state(model, flux="0.14")


def test_a_cell_inside_a_chain_is_refused_with_the_way_out(tmp_path: Path) -> None:
    dense = tx.NamedTuple(weight=np.ones((N_IN, 2), np.float32), bias=np.zeros(N_IN, np.float32), σ=())
    state = tx.NamedTuple(layers=(dense, _cell_state("GRUCell", seed=2)))
    with pytest.raises(tx.UnsupportedError, match=r"bare GRUCell inside a Chain.*GRU\(in => out\)"):
        _port(tmp_path, f"Chain(Dense(2 => {N_IN}), {_text('GRUCell')})", state, "equinox")


torch = pytest.importorskip("torch")

TORCH_CASES = [
    ("RNNCell", None, lambda: torch.nn.RNNCell(N_IN, HIDDEN)),
    ("RNNCell", "relu", lambda: torch.nn.RNNCell(N_IN, HIDDEN, nonlinearity="relu")),
    ("LSTMCell", None, lambda: torch.nn.LSTMCell(N_IN, HIDDEN)),
    ("GRUCell", None, lambda: torch.nn.GRUCell(N_IN, HIDDEN)),
]


@pytest.mark.parametrize(
    ("kind", "sigma", "make"), TORCH_CASES, ids=["RNNCell", "RNNCell-relu", "LSTMCell", "GRUCell"]
)
def test_convert_to_a_torch_cell_computes_what_fluxs_cell_does(
    kind: str, sigma: str | None, make: Any, tmp_path: Path
) -> None:
    """``convert --architecture`` writes the cell's tensors under torch's cell names (no ``_l0``);
    the torch cell loaded from them computes Flux's step, and reads back bit for bit."""
    from safetensors.torch import load_file

    from treexchange._cli import main

    text, state = _text(kind, sigma=sigma), _cell_state(kind, seed=21)
    tx.save(tmp_path / "cell.jld2", model_state=state)
    out = tmp_path / "cell.safetensors"
    assert main(["convert", str(tmp_path / "cell.jld2"), str(out), "--architecture", text]) == 0
    tensors = load_file(str(out))  # (keyed as nn.Sequential's, one group per Flux layer: "0.")
    assert sorted(tensors) == ["0.bias_hh", "0.bias_ih", "0.weight_hh", "0.weight_ih"]
    cell = make()
    cell.load_state_dict({k.removeprefix("0."): v for k, v in tensors.items()})
    x, h = _inputs(kind, seed=22)
    _, new_want = _expected(kind, text, state, x, h)
    carry = _py(h)
    given = tuple(torch.from_numpy(s) for s in carry) if kind == "LSTMCell" else torch.from_numpy(carry)
    with torch.no_grad():
        new = cell(torch.from_numpy(np.ascontiguousarray(x.T)), given)
    got = tuple(t.numpy() for t in new) if kind == "LSTMCell" else new.numpy()
    assert _max_diff(got, new_want) < TOL["atol"]
    again = tx.state_dict_to_flux(None, cell)  # (a module reads as the Chain of its layers)
    assert tx.values_equal(again.layers[0], state)


def test_torch_refuses_a_gruv3_cell() -> None:
    with pytest.raises(tx.UnsupportedError, match="GRUv3"):
        tx.flux_to_state_dict(_cell_state("GRUv3Cell", seed=1), _text("GRUv3Cell"))
