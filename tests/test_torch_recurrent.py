"""PyTorch RNN/LSTM/GRU and MultiheadAttention <-> Flux, proved by numbers.

torch's own modules run on random inputs and must compute what the numpy Flux reference computes on
the converted arrays (float32 tolerance), in both directions; Flux -> torch -> Flux is bit for bit.
Layers torch cannot compute (GRUv3, an RNN with another activation, a GRU candidate-gate bias_hh)
are refused, never approximated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import _flux_reference as ref
import numpy as np
import pytest

import treexchange as tx
from treexchange._port._arch import parse_architecture

torch = pytest.importorskip("torch")
nn = torch.nn


def _randomize(module: Any, seed: int) -> Any:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return module


def _torch_sequence(module: Any, x_jl: np.ndarray) -> np.ndarray:
    """A batch-first torch recurrent layer on a Julia ``(in, L, B)`` sequence -> Julia ``(H, L, B)``."""
    with torch.no_grad():
        y, _ = module(torch.from_numpy(np.ascontiguousarray(x_jl.transpose(2, 1, 0))))
    return y.numpy().transpose(2, 1, 0)


def _flux_sequence(text: str, state: Any, x_jl: np.ndarray) -> np.ndarray:
    layer = parse_architecture(text)
    return ref.recurrent(layer.children[0], state.layers[0], x_jl)


CASES = [
    ("RNN", "Chain(RNN(3 => 5))", lambda: nn.RNN(3, 5, batch_first=True)),
    ("RNN relu", "Chain(RNN(3 => 5, relu))", lambda: nn.RNN(3, 5, nonlinearity="relu", batch_first=True)),
    ("LSTM", "Chain(LSTM(3 => 4))", lambda: nn.LSTM(3, 4, batch_first=True)),
    ("GRU", "Chain(GRU(3 => 4))", lambda: nn.GRU(3, 4, batch_first=True)),
]


@pytest.mark.parametrize(("name", "text", "make"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("era", ["0.15", "0.14"])
def test_torch_to_flux_computes_the_same(name: str, text: str, make: Any, era: str) -> None:
    module = _randomize(make(), 1)
    if name == "GRU":  # torch's candidate-gate bias_hh has no Flux counterpart: it must be zero
        with torch.no_grad():
            module.bias_hh_l0[2 * 4 :] = 0
    sd = {f"0.{k}": v for k, v in module.state_dict().items()}
    state = tx.state_dict_to_flux(sd, text, flux=era)
    cell = state.layers[0].cell
    assert ("bias" if era == "0.15" and name != "GRU" else "b") in cell.keys()
    assert ("state0" in cell.keys()) == (era == "0.14")
    x = np.random.default_rng(2).normal(size=(3, 6, 2)).astype(np.float32)
    expected = _torch_sequence(module, x)
    np.testing.assert_allclose(_flux_sequence(text, state, x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("name", "text", "make"), CASES, ids=[c[0] for c in CASES])
def test_flux_to_torch_computes_the_same_and_round_trips_bit_exact(
    name: str, text: str, make: Any, tmp_path: Path
) -> None:
    module = _randomize(make(), 3)
    with torch.no_grad():
        module.bias_hh_l0.zero_()
    state = tx.state_dict_to_flux(None, nn.Sequential(module))
    # Through a real file, as a Julia user would hand it over.
    tx.save(tmp_path / "m.jld2", model_state=state)
    loaded = tx.load(tmp_path / "m.jld2", "model_state")
    fresh = _randomize(make(), 9)
    tx.load_into_module(nn.Sequential(fresh), loaded, text)
    assert not fresh.bias_hh_l0.detach().numpy().any()  # Flux's one bias is all in bias_ih
    x = np.random.default_rng(4).normal(size=(3, 5, 2)).astype(np.float32)
    np.testing.assert_allclose(
        _torch_sequence(fresh, x), _flux_sequence(text, loaded, x), rtol=1e-5, atol=1e-5
    )
    again = tx.state_dict_to_flux(None, nn.Sequential(fresh))
    assert tx.values_equal(again, state)


NO_BIAS = [
    ("RNN", "Chain(RNN(3 => 5; bias=false))", lambda: nn.RNN(3, 5, bias=False, batch_first=True)),
    ("LSTM", "Chain(LSTM(3 => 4; bias=false))", lambda: nn.LSTM(3, 4, bias=False, batch_first=True)),
    ("GRU", "Chain(GRU(3 => 4; bias=false))", lambda: nn.GRU(3, 4, bias=False, batch_first=True)),
]


@pytest.mark.parametrize(("name", "text", "make"), NO_BIAS, ids=[c[0] for c in NO_BIAS])
def test_torch_bias_false_is_flux_bias_false_both_ways(
    name: str, text: str, make: Any, tmp_path: Path
) -> None:
    """torch's ``bias=False`` (neither bias) is Flux ≥ 0.15's ``bias=false`` (``false`` in the
    state): the same equations without the biases, the GRU's reset product included."""
    module = _randomize(make(), 11)
    state = tx.state_dict_to_flux(None, nn.Sequential(module))
    assert state.layers[0].cell[("b" if name == "GRU" else "bias")] is False
    x = np.random.default_rng(12).normal(size=(3, 6, 2)).astype(np.float32)
    np.testing.assert_allclose(
        _flux_sequence(text, state, x), _torch_sequence(module, x), rtol=1e-5, atol=1e-5
    )
    tx.save(tmp_path / "m.jld2", model_state=state)
    fresh = _randomize(make(), 13)
    tx.load_into_module(nn.Sequential(fresh), tx.load(tmp_path / "m.jld2", "model_state"), text)
    np.testing.assert_array_equal(_torch_sequence(fresh, x), _torch_sequence(module, x))
    assert set(tx.flux_to_state_dict(state, text)) == {"0.weight_ih_l0", "0.weight_hh_l0"}


def test_bias_hh_folds_into_b_for_lstm() -> None:
    module = _randomize(nn.LSTM(2, 3, batch_first=True), 5)
    state = tx.state_dict_to_flux(None, nn.Sequential(module))
    b = module.bias_ih_l0.detach().numpy() + module.bias_hh_l0.detach().numpy()
    np.testing.assert_array_equal(state.layers[0].cell.bias, b)


def test_gru_candidate_bias_hh_is_refused() -> None:
    module = _randomize(nn.GRU(2, 3, batch_first=True), 6)
    with pytest.raises(tx.UnsupportedError, match="candidate gate"):
        tx.state_dict_to_flux(None, nn.Sequential(module))


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("Chain(GRUv3(2 => 3))", "GRUv3"),
        ("Chain(RNN(2 => 3, sigmoid))", "tanh or relu"),
        ("Chain(MultiHeadAttention((4, 4, 4) => 8 => 4; nheads=2))", "embed_dim"),
    ],
)
def test_layers_torch_cannot_compute_are_refused(text: str, match: str) -> None:
    with pytest.raises(tx.UnsupportedError, match=match):
        tx.flux_to_state_dict(tx.NamedTuple(layers=((),)), text)


def test_multilayer_or_bidirectional_torch_rnn_is_refused() -> None:
    for module in (nn.LSTM(2, 3, num_layers=2), nn.GRU(2, 3, bidirectional=True)):
        with pytest.raises(tx.UnsupportedError, match="one layer, one direction"):
            tx.state_dict_to_flux(None, nn.Sequential(module))


def test_dry_run_lines_name_bias_hh() -> None:
    from treexchange._interop._torch import mapping_lines

    sd = {f"0.{k}": v for k, v in nn.LSTM(2, 3).state_dict().items()}
    lines = mapping_lines(sd, "Chain(LSTM(2 => 3))")
    assert lines[0].startswith("0.weight_ih_l0 -> model_state.layers[1].Wi")
    assert "0.bias_hh_l0 -> (no Flux array)" in lines[3] and "folded into b" in lines[3]


ATTENTION = [
    ("self, bias", 8, 2, None, True),
    ("self, no bias", 8, 4, None, False),
    ("kdim/vdim", 6, 3, (5, 7), True),
]


@pytest.mark.parametrize(("name", "e", "heads", "kv", "bias"), ATTENTION, ids=[a[0] for a in ATTENTION])
def test_multihead_attention_both_directions(
    name: str, e: int, heads: int, kv: tuple[int, int] | None, bias: bool, tmp_path: Path
) -> None:
    kdim, vdim = kv or (e, e)
    module = nn.MultiheadAttention(e, heads, bias=bias, kdim=kdim, vdim=vdim, batch_first=True)
    _randomize(module, 7).eval()
    state = tx.state_dict_to_flux(None, nn.Sequential(module))
    flag = str(bias).lower()
    text = f"Chain(MultiHeadAttention(({e}, {kdim}, {vdim}) => {e} => {e}; nheads={heads}, bias={flag}))"
    rng = np.random.default_rng(8)
    q = rng.normal(size=(e, 4, 2)).astype(np.float32)  # Julia (features, length, batch)
    k = rng.normal(size=(kdim, 5, 2)).astype(np.float32)
    v = rng.normal(size=(vdim, 5, 2)).astype(np.float32)

    def run(m: Any) -> np.ndarray:
        def t(a: np.ndarray) -> Any:
            return torch.from_numpy(np.ascontiguousarray(a.transpose(2, 1, 0)))

        with torch.no_grad():
            y, _ = m(t(q), t(k), t(v), need_weights=False)
        return y.numpy().transpose(2, 1, 0)

    layer = parse_architecture(text).children[0]
    expected, _ = ref.multi_head_attention(layer, state.layers[0], (q, k, v))
    np.testing.assert_allclose(run(module), expected, rtol=1e-5, atol=1e-5)
    # Flux -> torch through a file, into a fresh module.
    tx.save(tmp_path / "a.jld2", model_state=state)
    fresh = nn.MultiheadAttention(e, heads, bias=bias, kdim=kdim, vdim=vdim, batch_first=True).eval()
    tx.load_into_module(nn.Sequential(fresh), tx.load(tmp_path / "a.jld2", "model_state"), text)
    np.testing.assert_array_equal(run(fresh), run(module))
    assert tx.values_equal(tx.state_dict_to_flux(None, nn.Sequential(fresh)), state)


@pytest.mark.parametrize(("name", "text", "make"), CASES[2:], ids=[c[0] for c in CASES[2:]])
def test_a_learnt_initial_state_is_named_when_left_out_of_the_state_dict(
    name: str, text: str, make: Any, tmp_path: Path, capsys: Any
) -> None:
    """SebEyes/SLAM-RNN code/model/RNN_V4.jld2 (blob fac835c5): a Flux 0.14 ``Flux.state``
    of ``Chain(LSTM, LSTM, Dense, Dense)`` whose ``Recur``s learnt ``state0``. ``convert
    --architecture`` to a PyTorch state_dict left it out without a word (no torch RNN module holds
    an initial state), and the torch model computed another function (rel. error 1e-2). It is named;
    the torch module given it as ``h0`` (``h0, c0``) computes what the Recur does."""
    from treexchange._cli import main

    module = _randomize(make(), 5)
    with torch.no_grad():
        module.bias_hh_l0.zero_()
    state = tx.state_dict_to_flux({f"0.{k}": v for k, v in module.state_dict().items()}, text, flux="0.14")
    rng = np.random.default_rng(7)
    h, c = (rng.normal(size=(4, 1)).astype(np.float32) for _ in range(2))
    cell = state.layers[0].cell
    cell = tx.NamedTuple(
        (k, ((h, c) if name == "LSTM" else h) if k == "state0" else v) for k, v in cell.items()
    )
    recur = tx.NamedTuple((k, cell if k == "cell" else v) for k, v in state.layers[0].items())
    state = tx.NamedTuple(layers=(recur,))
    tx.save(tmp_path / "m.jld2", model_state=state)
    out = tmp_path / "m.safetensors"
    assert main(["convert", str(tmp_path / "m.jld2"), str(out), "--architecture", text]) == 0
    note = capsys.readouterr().err
    assert "model_state.layers[1].cell.state0: a learnt initial state" in note and "h0" in note
    from safetensors.torch import load_file

    fresh = make()
    fresh.load_state_dict({k[2:]: v for k, v in load_file(str(out)).items()})
    x = rng.normal(size=(3, 6, 2)).astype(np.float32)  # Julia (in, L, B)
    expected = _flux_sequence(text, state, x)
    h0 = torch.from_numpy(np.repeat(h.T[None], 2, axis=1))  # (layers, B, H)
    initial = (h0, torch.from_numpy(np.repeat(c.T[None], 2, axis=1))) if name == "LSTM" else h0
    with torch.no_grad():
        y, _ = fresh(torch.from_numpy(np.ascontiguousarray(x.transpose(2, 1, 0))), initial)
    np.testing.assert_allclose(y.numpy().transpose(2, 1, 0), expected, rtol=1e-5, atol=1e-5)
    assert np.abs(_torch_sequence(fresh, x) - expected).max() > 1e-3  # from zeros: another function
