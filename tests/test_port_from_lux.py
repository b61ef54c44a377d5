"""``tx.from_lux``: trained Lux models (``ps``/``st`` + the Lux model text) -> Equinox, nnx, linen.

The acceptance case is the Lux docs' trained spiral classifier (``lux-docs_v0.5.23_trained_model.jld2``:
``SpiralClassifier(lstm_cell = LSTMCell(2 => 8), classifier = Dense(8 => 1, sigmoid))``, Lux 0.5.23).
Fresh sequences come from a numpy rewrite of MLUtils' ``make_spiral`` (n = 50 points per spiral,
``a = 6.5``, ``θ = 16``, ``b = 104``, Gaussian noise 0.1 on both coordinates); as in the tutorial the
first spiral of a draw is labelled 0 and the second (the first one negated) 1, each sample a
``(2, 50)`` Julia sequence (features × time). The ported models must reproduce the tutorial's
validation numbers (binary cross-entropy about 0.005, accuracy 1.0) and agree per sample with a
numpy forward pass written from Lux's ``LSTMCell`` equations (gates ``i, f, g, o`` in that order).

Why the loss band is ``0.0051 ± 0.001``: over 200 fresh samples the loss of the file's weights is
0.00511 with a spread of 1e-5 between draws (the per-sample losses have standard deviation 0.0024, so
the standard error of a 200-sample mean is 1.7e-4; ± 0.001 is about 6 of them). The 23 wrong orders
of the four gate blocks give losses from 0.012 to 1.2, and 19 of them still classify every sample
correctly: accuracy alone would pass them, the loss band and the per-sample probabilities do not.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import BUNDLED_DIR, FIXTURES, absent_reason, present_cases

import treexchange as tx
from treexchange._port._fromlux import lux_version

SPIRAL = FIXTURES / "lux" / "lux-docs_v0.5.23_trained_model.jld2"
EIKONET = FIXTURES / "lux" / "eikonet_model.jld2"
SPIRAL_PARTS = {"lstm_cell": "LSTMCell(2 => 8)", "classifier": "Dense(8 => 1, sigmoid)"}
LOSS, LOSS_TOLERANCE = 0.0051, 0.001
needs_spiral = pytest.mark.skipif(not SPIRAL.is_file(), reason=str(absent_reason("lux/" + SPIRAL.name)))


# --- data and the numpy reference ---------------------------------------------------------------


def make_spiral(rng: np.random.Generator, n: int = 50) -> np.ndarray:
    """MLUtils.Datasets.make_spiral(n) (a = 6.5, θ = 16, b = 104, noise = 0.1): a (2, 2n) array,
    the first n columns one spiral, the last n the same points negated, then noise on everything."""
    index = np.arange(n, dtype=np.float64)
    angle, radius = index * np.pi / 16.0, 6.5 * (104.0 - index) / 104.0
    x = np.zeros((2, 2 * n))
    x[0, :n], x[1, :n] = radius * np.sin(angle), radius * np.cos(angle)
    x[:, n:] = -x[:, :n]
    return x + 0.1 * rng.standard_normal((2, 2 * n))


def spiral_data(seed: int, count: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """``count`` Julia sequences ``(count, 2, 50)`` (features × time per sample) and their labels:
    the first half the first spiral of a fresh draw (label 0), the second half the second (label 1)."""
    rng = np.random.default_rng(seed)
    xs, ys = [], []
    for k in range(count):
        second = k >= count // 2
        spiral = make_spiral(rng)
        xs.append(spiral[:, 50:] if second else spiral[:, :50])
        ys.append(float(second))
    return np.stack(xs).astype(np.float32), np.array(ys, np.float32)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-v))


def lux_reference(ps: Any, x: np.ndarray) -> np.ndarray:
    """The tutorial's forward in float64 from Lux 0.5's definitions: ``LSTMCell`` from zero state and
    memory, ``g = W_i x + W_h h + b`` split into ``i, f, g, o``; ``c' = σ(f) c + σ(i) tanh(g)``,
    ``h' = σ(o) tanh(c')``; then ``Dense(8 => 1, sigmoid)`` on the last ``h``."""
    cell, head = ps.lstm_cell, ps.classifier
    wi, wh, b = (np.asarray(a, np.float64) for a in (cell.weight_i, cell.weight_h, cell.bias))
    hidden = wh.shape[1]
    h = np.zeros((hidden, x.shape[0]))
    c = np.zeros_like(h)
    for t in range(x.shape[2]):
        i, f, g, o = np.split(wi @ x[:, :, t].T + wh @ h + b.reshape(-1, 1), 4)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    w, bias = np.asarray(head.weight, np.float64), np.asarray(head.bias, np.float64)
    return _sigmoid(w @ h + bias.reshape(-1, 1))[0]


def binary_cross_entropy(p: np.ndarray, y: np.ndarray) -> float:
    """The tutorial's ``binarycrossentropy`` (``eps(Float32)`` added inside the logarithms)."""
    eps = float(np.finfo(np.float32).eps)
    return float(np.mean(-(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))))


# --- running the ported parts ---------------------------------------------------------------------


def run_parts(parts: dict[str, Any], target: str, x: np.ndarray) -> np.ndarray:
    """The tutorial's composition in the target: the cell over the sequence, the head on its last step."""
    seqs = jnp.asarray(x.transpose(0, 2, 1))  # Julia (2, 50) per sample -> (time, features)
    if target == "equinox":
        lstm, head = parts["lstm_cell"], parts["classifier"]
        return np.asarray(jax.vmap(lambda s: head(lstm(s)[-1])[0])(seqs))
    if target == "nnx":
        return np.asarray(parts["classifier"](parts["lstm_cell"](seqs)[:, -1]))[:, 0]
    (lstm_module, lstm_vars), (head_module, head_vars) = parts["lstm_cell"], parts["classifier"]
    return np.asarray(head_module.apply(head_vars, lstm_module.apply(lstm_vars, seqs)[:, -1]))[:, 0]


def assert_tutorial_numbers(p: np.ndarray, y: np.ndarray, reference: np.ndarray) -> None:
    loss = binary_cross_entropy(p, y)
    assert abs(loss - LOSS) < LOSS_TOLERANCE, f"loss {loss:.5f}, the Lux docs' is about {LOSS}"
    assert np.mean((p > 0.5) == y) == 1.0
    np.testing.assert_allclose(p, reference, rtol=0, atol=1e-5)


@needs_spiral
@pytest.mark.parametrize("target", ["equinox", "nnx", "linen"])
def test_the_lux_docs_spiral_classifier_classifies_fresh_spirals_as_in_the_tutorial(target: str) -> None:
    ps = tx.load(SPIRAL, "ps_trained")
    parts = tx.from_lux(SPIRAL, ps="ps_trained", st="st_trained", architecture=SPIRAL_PARTS, target=target)
    assert set(parts) == {"lstm_cell", "classifier"}
    x, y = spiral_data(seed=0)
    p = run_parts(parts, target, x)
    assert_tutorial_numbers(p, y, lux_reference(ps, x.astype(np.float64)))


def _permuted_gates(ps: Any, order: tuple[int, ...]) -> Any:
    def blocks(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.concatenate([np.split(a, 4)[k] for k in order]))

    cell = ps.lstm_cell
    return tx.NamedTuple(
        lstm_cell=tx.NamedTuple((name, blocks(np.asarray(cell[name]))) for name in cell),
        classifier=ps.classifier,
    )


@needs_spiral
@pytest.mark.parametrize("order", [(1, 0, 2, 3), (3, 1, 2, 0)], ids=["f-i-g-o", "o-f-g-i"])
def test_a_wrong_gate_order_is_caught_by_the_loss_and_the_probabilities(
    order: tuple[int, ...], tmp_path: Path
) -> None:
    """Lux's gate blocks put in another order (f-i-g-o swaps input and forget; o-f-g-i is the wrong
    order closest to the right loss): accuracy stays 1.0, the acceptance check fails."""
    ps, st = tx.load(SPIRAL, "ps_trained"), tx.load(SPIRAL, "st_trained")
    path = tmp_path / "wrong_gates.jld2"
    tx.save(path, ps_trained=_permuted_gates(ps, order), st_trained=st)
    parts = tx.from_lux(path, ps="ps_trained", st="st_trained", architecture=SPIRAL_PARTS)
    x, y = spiral_data(seed=0)
    p = run_parts(parts, "equinox", x)
    assert np.mean((p > 0.5) == y) == 1.0  # accuracy cannot tell
    assert abs(binary_cross_entropy(p, y) - LOSS) > 5 * LOSS_TOLERANCE
    with pytest.raises(AssertionError):
        assert_tutorial_numbers(p, y, lux_reference(ps, x.astype(np.float64)))


def test_every_wrong_gate_order_leaves_the_loss_band_of_the_numpy_reference() -> None:
    """The claim behind the tolerance, on all 23 wrong orders (numpy only)."""
    if not SPIRAL.is_file():
        pytest.skip(str(absent_reason("lux/" + SPIRAL.name)))
    ps = tx.load(SPIRAL, "ps_trained")
    x, y = spiral_data(seed=0)
    right = binary_cross_entropy(lux_reference(ps, x.astype(np.float64)), y)
    assert abs(right - LOSS) < LOSS_TOLERANCE
    for order in itertools.permutations(range(4)):
        if order != (0, 1, 2, 3):
            wrong = binary_cross_entropy(lux_reference(_permuted_gates(ps, order), x.astype(np.float64)), y)
            assert abs(wrong - LOSS) > 5 * LOSS_TOLERANCE, order


def _as_lux_v1(ps: Any, rng: np.random.Generator) -> Any:
    """The spiral classifier's ps as Lux ≥ 1 names it: ``weight_ih``/``weight_hh``, the bias split
    into ``bias_ih + bias_hh`` (random halves: only their sum matters), Dense bias ``(out,)``."""
    cell, head = ps.lstm_cell, ps.classifier
    bias = np.asarray(cell.bias).reshape(-1)
    part = rng.standard_normal(bias.shape).astype(np.float32)
    return tx.NamedTuple(
        lstm_cell=tx.NamedTuple(
            weight_ih=np.asarray(cell.weight_i),
            weight_hh=np.asarray(cell.weight_h),
            bias_ih=part,
            bias_hh=(bias - part).astype(np.float32),
        ),
        classifier=tx.NamedTuple(weight=np.asarray(head.weight), bias=np.asarray(head.bias).reshape(-1)),
    )


@needs_spiral
@pytest.mark.parametrize("target", ["equinox", "linen"])
def test_lux_v1_names_and_two_recurrent_biases_port_to_the_same_numbers(target: str, tmp_path: Path) -> None:
    ps = tx.load(SPIRAL, "ps_trained")
    v1 = _as_lux_v1(ps, np.random.default_rng(5))
    path = tmp_path / "spiral_v1.jld2"
    st = tx.NamedTuple(lstm_cell=tx.NamedTuple(), classifier=tx.NamedTuple())
    tx.save(path, ps=v1, st=st)
    assert lux_version(tx.load(path, "ps")) == "1"
    parts = tx.from_lux(path, architecture=SPIRAL_PARTS, target=target)
    x, y = spiral_data(seed=1)
    assert_tutorial_numbers(run_parts(parts, target, x), y, lux_reference(ps, x.astype(np.float64)))


@needs_spiral
@pytest.mark.parametrize("target", ["equinox", "nnx", "linen"])
def test_a_top_level_recurrence_returns_the_last_step_as_lux_does(target: str, tmp_path: Path) -> None:
    """``Recurrence(LSTMCell(2 => 8))`` (return_sequence=false): the model's output is Lux's last
    ``h``, which the classifier then maps to the tutorial's probabilities."""
    ps = tx.load(SPIRAL, "ps_trained")
    path = tmp_path / "recurrence.jld2"
    tx.save(path, ps=ps.lstm_cell, st=tx.NamedTuple())
    last = tx.from_lux(path, architecture="Recurrence(LSTMCell(2 => 8))", target=target)
    full = tx.from_lux(path, architecture="Recurrence(LSTMCell(2 => 8); return_sequence=true)", target=target)
    x, _ = spiral_data(seed=2, count=8)
    seqs = jnp.asarray(x.transpose(0, 2, 1))
    if target == "equinox":
        h_last, h_all = jax.vmap(last)(seqs), jax.vmap(full)(seqs)[:, -1]
    elif target == "nnx":
        h_last, h_all = last(seqs), full(seqs)[:, -1]
    else:
        h_last, h_all = last[0].apply(last[1], seqs), full[0].apply(full[1], seqs)[:, -1]
    assert h_last.shape == (8, 8)
    np.testing.assert_array_equal(np.asarray(h_last), np.asarray(h_all))
    head = ps.classifier
    p = _sigmoid(np.asarray(head.weight) @ np.asarray(h_last, np.float64).T + np.asarray(head.bias))[0]
    np.testing.assert_allclose(p, lux_reference(ps, x.astype(np.float64)), atol=1e-5)


@needs_spiral
@pytest.mark.parametrize("target", ["equinox", "nnx", "linen"])
def test_a_chain_around_a_last_step_recurrence_ports_part_by_part(target: str, tmp_path: Path) -> None:
    """The usual Lux recurrent classifier, ``Chain(Recurrence(LSTMCell(2 => 8)), Dense(8 => 1,
    sigmoid))``, holding the tutorial's weights: one model computing the tutorial's probabilities."""
    ps = tx.load(SPIRAL, "ps_trained")
    path = tmp_path / "chain.jld2"
    lux_ps = tx.NamedTuple(layer_1=ps.lstm_cell, layer_2=ps.classifier)
    lux_st = tx.NamedTuple(layer_1=tx.NamedTuple(), layer_2=tx.NamedTuple())
    tx.save(path, ps=lux_ps, st=lux_st)
    text = """Chain(
        layer_1 = Recurrence(
            cell = LSTMCell(2 => 8),        # 352 parameters, plus 1
        ),
        layer_2 = Dense(8 => 1, sigmoid),   # 9 parameters
    )"""
    model = tx.from_lux(path, architecture=text, target=target)
    x, y = spiral_data(seed=3)
    seqs = jnp.asarray(x.transpose(0, 2, 1))
    if target == "equinox":
        p = np.asarray(jax.vmap(model)(seqs))[:, 0]
    elif target == "nnx":
        p = np.asarray(model(seqs))[:, 0]
    else:
        p = np.asarray(model[0].apply(model[1], seqs))[:, 0]
    assert_tutorial_numbers(p, y, lux_reference(ps, x.astype(np.float64)))


@needs_spiral
def test_a_stateful_recurrent_cell_ports_as_its_cell_over_consecutive_calls(tmp_path: Path) -> None:
    """``StatefulRecurrentCell(LSTMCell(2 => 8))``: ``ps`` is the cell's, ``st`` is ``(cell = (rng,),
    carry = nothing)``; fed one sequence step by step from a fresh carry it gives the cell's outputs."""
    ps, st = tx.load(SPIRAL, "ps_trained"), tx.load(SPIRAL, "st_trained")
    path = tmp_path / "stateful.jld2"
    stateful_st = tx.NamedTuple(
        lstm_cell=tx.NamedTuple(cell=st.lstm_cell, carry=None), classifier=st.classifier
    )
    tx.save(path, ps=ps, st=stateful_st)
    parts = {"lstm_cell": "StatefulRecurrentCell(LSTMCell(2 => 8))", "classifier": "Dense(8 => 1, sigmoid)"}
    ported = tx.from_lux(path, architecture=parts)
    x, y = spiral_data(seed=4)
    assert_tutorial_numbers(run_parts(ported, "equinox", x), y, lux_reference(ps, x.astype(np.float64)))


# --- checks against the file ----------------------------------------------------------------------


@needs_spiral
def test_an_architecture_that_does_not_fit_lists_every_misfit_with_its_path() -> None:
    wrong = {"lstm_cell": "LSTMCell(2 => 16)", "classifier": "Dense(8 => 1, sigmoid)"}
    with pytest.raises(tx.MismatchError) as info:
        tx.from_lux(SPIRAL, ps="ps_trained", st="st_trained", architecture=wrong)
    text = str(info.value)
    assert "ps_trained.lstm_cell.weight_i" in text and "ps_trained.lstm_cell.weight_h" in text
    assert "ps_trained.lstm_cell.bias" in text


@needs_spiral
def test_named_parts_must_match_the_entries_of_ps() -> None:
    with pytest.raises(tx.ConversionError, match="'head'"):
        parts = {"lstm_cell": "LSTMCell(2 => 8)", "head": "Dense(8 => 1)"}
        tx.from_lux(SPIRAL, "ps_trained", "st_trained", parts)
    with pytest.raises(tx.ConversionError, match="classifier"):  # holds arrays: cannot be left out
        tx.from_lux(SPIRAL, "ps_trained", "st_trained", {"lstm_cell": "LSTMCell(2 => 8)"})


@needs_spiral
def test_wrong_arguments_are_named() -> None:
    with pytest.raises(TypeError, match="architecture must be"):
        tx.from_lux(SPIRAL, "ps_trained", "st_trained", 123)  # type: ignore[arg-type]
    with pytest.raises(tx.TreexchangeError, match="nope"):
        tx.from_lux(SPIRAL, "nope", "st_trained", "Dense(2 => 3)")
    with pytest.raises(tx.ConversionError, match="line 1, column 22"):
        tx.from_lux(SPIRAL, "ps_trained", "st_trained", "Chain(Dense(2 => 8), ")
    with pytest.raises(ValueError, match="lux must be"):
        tx.from_lux(SPIRAL, "ps_trained", "st_trained", SPIRAL_PARTS, lux="2")


def test_batchnorm_needs_the_st_holding_its_statistics(tmp_path: Path) -> None:
    lux_ps, lux_st, _, _ = _random_lux_cnn(np.random.default_rng(0), "1")
    path = tmp_path / "cnn.jld2"
    tx.save(path, ps=lux_ps, st=lux_st)
    with pytest.raises(tx.ConversionError, match="pass st="):
        tx.from_lux(path, st=None, architecture=CNN_TEXT)
    with pytest.raises(tx.MismatchError, match=r"st\.layer_2\.running_var"):  # its statistics must fit
        wrong = tx.NamedTuple(
            {**lux_st, "layer_2": tx.NamedTuple({**lux_st.layer_2, "running_var": np.ones(5)})}
        )
        tx.save(path, ps=lux_ps, st=wrong)
        tx.from_lux(path, architecture=CNN_TEXT)


LUX1_PRINTED = """Chain(
    name = nothing,
    layer_1 = Conv((3, 3), 1 => 4, relu, pad=1),                # 40 parameters
    layer_2 = BatchNorm(4, relu, affine=true, track_stats=true),  # 8 parameters, plus 9
    layer_3 = FlattenLayer{Nothing}(nothing),
    layer_4 = SkipConnection(
        connection = +,
        layers = Chain(
            name = nothing,
            layer_1 = Dense(16 => 16, elu),                        # 272 parameters
        ),
    ),
    layer_5 = Parallel(
        connection = vcat,
        layer_1 = Dense(16 => 3),                                   # 51 parameters
        layer_2 = Dense(16 => 3; use_bias=false),                   # 48 parameters
        name = nothing,
    ),
)         # Total: 419 parameters,
          #        plus 9 states."""


def test_the_forms_lux_1_prints_are_read() -> None:
    """Lux ≥ 1's ``show`` names every field of a container (``name = nothing``, ``connection = +``,
    ``layers = …``), prints static booleans as ``static(false)`` and some layers with their type
    parameters: all read as the Flux twin."""
    from treexchange._port._luxarch import parse_lux_architecture

    net = parse_lux_architecture(LUX1_PRINTED).layer
    assert net is not None and net.names is None
    kinds = ["Chain", "Conv", "BatchNorm", "flatten", "SkipConnection", "Chain", "Dense", "Parallel"]
    assert net.kinds() == [*kinds, "Dense", "Dense"]
    skip, parallel = net.children[3], net.children[4]
    assert skip.args["connection"] == "+" and parallel.args["connection"] == "vcat"
    assert parallel.children[1].args["bias"] is False
    assert net.children[0].args["pad"] == (1, 1, 1, 1)
    recurrence = """Recurrence(
        cell = LSTMCell(2 => 8),
        ordering = BatchLastIndex(),
        return_sequence = static(true),
    )"""
    piece = parse_lux_architecture(recurrence)
    assert piece.layer is not None and piece.layer.kind == "LSTM" and not piece.last_step


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("Chain(SkipConnection(Recurrence(LSTMCell(2 => 8)), +), Dense(8 => 1))", "last step"),
        ("Parallel(+, Chain(Recurrence(LSTMCell(2 => 8))), Dense(2 => 8))", "last step"),
        ("LSTMCell(2 => 8; train_state=true)", "initial state"),
        ("LayerNorm((4,))", "LayerNorm"),
        ("Recurrence(GRUCell(2 => 8))", "reset product"),
        ("Chain(Dense(4 => 4), FlattenLayer(N = 2))", "FlattenLayer"),
        ("Chain(Dense(2 => 8), Scan(3))", "Scan"),
    ],
)
def test_lux_layers_without_a_flux_twin_are_refused_naming_their_position(text: str, match: str) -> None:
    from treexchange._port._luxarch import parse_lux_architecture

    with pytest.raises(tx.UnsupportedError, match=match) as info:
        parse_lux_architecture(text)
    assert "line 1, column" in str(info.value)


def test_a_lux_05_rnn_cell_is_refused_because_it_starts_from_ones(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    ps = tx.NamedTuple(
        weight_ih=rng.standard_normal((4, 2)).astype(np.float32),
        weight_hh=rng.standard_normal((4, 4)).astype(np.float32),
        bias=np.zeros(4, np.float32),
    )
    path = tmp_path / "rnn05.jld2"
    tx.save(path, ps=ps, st=tx.NamedTuple())
    with pytest.raises(tx.UnsupportedError, match="ones"):
        tx.from_lux(path, architecture="RNNCell(2 => 4)")


# --- the other real Lux file ------------------------------------------------------------------------

EIKONET_BLOCK = "SkipConnection(Chain(Dense(16 => 32, elu), Dense(32 => 16, elu)), +)"
EIKONET_PARTS = {
    "layer_2": "Dense(4 => 16, elu)",
    **{f"layer_{i}": EIKONET_BLOCK for i in range(3, 9)},
    "layer_9": "Dense(16 => 1, relu)",
}


@pytest.mark.parametrize(
    ("form", "target"),
    present_cases(
        [("parts", "equinox"), ("chain", "equinox"), ("chain", "nnx"), ("chain", "linen")],
        relpath=lambda case: "lux/" + EIKONET.name,
    ),
)
def test_eikonet_ports_and_computes_what_lux_computes(form: str, target: str) -> None:
    """EikoNet's Lux chain; its ``layer_1`` (the repository's own ``CylindricalSymmetry`` feature map,
    no parameters) has no Lux twin: left out of the parts, or a ``NoOpLayer()`` in the chain (the
    test feeds its 4 output features directly)."""
    from test_port_lux import _eikonet_lux_forward  # the numpy Lux forward of layers 2..9

    ps = tx.load(EIKONET, "ps")
    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    samples = jnp.asarray(x.T)
    if form == "parts":
        parts = tx.from_lux(EIKONET, architecture=EIKONET_PARTS)

        def forward(h: Any) -> Any:
            for name in EIKONET_PARTS:
                h = parts[name](h)
            return h

        got = np.asarray(jax.vmap(forward)(samples)).T
    else:
        text = "Chain(NoOpLayer(), " + ", ".join(EIKONET_PARTS.values()) + ")"
        model = tx.from_lux(EIKONET, architecture=text, target=target)
        if target == "equinox":
            got = np.asarray(jax.vmap(model)(samples)).T
        elif target == "nnx":
            got = np.asarray(model(samples)).T
        else:
            got = np.asarray(model[0].apply(model[1], samples)).T
    want = _eikonet_lux_forward(ps, x.astype(np.float64))
    assert np.abs(want).max() > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


# --- Conv, BatchNorm, Lux names for Flux's CrossCor and flatten ----------------------------------------


CNN_TEXT = """Chain(
    layer_1 = Conv((3, 3), 2 => 4),                                  # 76 parameters
    layer_2 = BatchNorm(4, relu; epsilon=1.0f-5),                    # 8 parameters, plus 9 states
    layer_3 = Conv((2, 2), 4 => 3, tanh; cross_correlation=true),    # 51 parameters
    layer_4 = FlattenLayer(),
    layer_5 = Dense(27 => 5),                                        # 140 parameters
)"""


def _random_lux_cnn(rng: np.random.Generator, lux: str) -> tuple[Any, Any, Any, Any]:
    """Random Lux ``(ps, st)`` of the chain below as Lux ``lux`` stores them, and the same in Lux 1's
    shapes (what the numpy forward reads)."""
    nt = tx.NamedTuple

    def rand(*shape: int, low: float | None = None) -> np.ndarray:
        a = rng.uniform(low, 1.5, shape) if low is not None else rng.standard_normal(shape)
        return a.astype(np.float32)

    ps = nt(
        layer_1=nt(weight=rand(3, 3, 2, 4), bias=rand(4)),
        layer_2=nt(scale=rand(4), bias=rand(4)),
        layer_3=nt(weight=rand(2, 2, 4, 3), bias=rand(3)),
        layer_4=nt(),
        layer_5=nt(weight=rand(5, 27), bias=rand(5)),
    )
    training = tx.Singleton("Base.Val{true}")
    st = nt(
        layer_1=nt(),
        layer_2=nt(running_mean=rand(4), running_var=rand(4, low=0.5), training=training),
        layer_3=nt(),
        layer_4=nt(),
        layer_5=nt(),
    )
    if lux == "1":
        return ps, st, ps, st
    conv = {"layer_1": (1, 1, 4, 1), "layer_3": (1, 1, 3, 1), "layer_5": (5, 1)}  # Lux 0.5 bias shapes
    stored = nt(
        (
            name,
            nt({**layer, "bias": np.ascontiguousarray(layer.bias.reshape(conv[name]))})
            if name in conv
            else layer,
        )
        for name, layer in ps.items()
    )
    return stored, st, ps, st


@pytest.mark.parametrize("lux", ["1", "0.5"])
@pytest.mark.parametrize("target", ["equinox", "nnx"])
def test_a_conv_batchnorm_chain_ports_from_its_lux_text(lux: str, target: str, tmp_path: Path) -> None:
    from test_port_lux import _lux_cnn_forward  # Lux's numpy forward of this chain

    lux_ps, lux_st, ps, st = _random_lux_cnn(np.random.default_rng(3), lux)
    path = tmp_path / "cnn.jld2"
    tx.save(path, ps=lux_ps, st=lux_st)
    text = CNN_TEXT
    model = tx.from_lux(path, architecture=text, target=target)
    x = np.random.default_rng(1).standard_normal((6, 6, 2, 5)).astype(np.float32)  # Julia WHCN
    want = _lux_cnn_forward(ps, st, x.astype(np.float64))
    if target == "equinox":
        net, state = model
        got = np.asarray(jax.vmap(lambda xi: net(xi, state)[0])(jnp.asarray(x.transpose(3, 2, 1, 0)))).T
    else:
        got = np.asarray(model(jnp.asarray(x.transpose(3, 1, 0, 2)))).T
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_lux_version_is_read_from_the_names_and_bias_shapes() -> None:
    nt = tx.NamedTuple
    assert lux_version(nt(a=nt(weight_i=np.ones((8, 2)), weight_h=np.ones((8, 2)), bias=np.ones(8)))) == "0.5"
    assert lux_version(nt(a=nt(weight=np.ones((3, 2)), bias=np.ones((3, 1))))) == "0.5"
    assert lux_version(nt(a=nt(weight=np.ones((3, 2)), bias=np.ones(3)))) == "1"
    assert lux_version(nt(a=nt(scale=np.ones(3), bias=np.ones(3)))) == "1"
    with pytest.raises(tx.ConversionError, match="lux="):
        lux_version(nt(a=nt(weight=np.ones((3, 2)), bias=np.ones((3, 1))), b=nt(bias_ih=np.ones(3))))


# --- a ComponentArray θ: SeriesForecast's neural ODE -------------------------------------------------

SERIES = {v: FIXTURES / "lux" / f"seriesforecast_params_{v}.jld2" for v in ("v011", "v020")}
SERIES_DATA = FIXTURES / "misc" / "seriesforecast_data.jld2"
# BuiltWithGenie/SeriesForecast lib/NodeUtils.jl: f = Lux.Chain(Dense(data_dim, 64, swish),
# Dense(64, 32, swish), Dense(32, data_dim)), run by DiffEqFlux's NeuralODE (dy/dt = f(y)).
SERIES_TEXT = "Chain(Dense(4 => 64, swish), Dense(64 => 32, swish), Dense(32 => 4))"


def _integrate(f: Any, y0: np.ndarray, times: np.ndarray, substeps: int = 50) -> np.ndarray:
    """dy/dt = f(y) from y0, by classical Runge–Kutta with ``substeps`` steps between the times;
    the states at ``times`` as columns (the solver's tolerance 1e-9 is far below what is asserted)."""

    def rk4(y: Any, h: Any) -> Any:
        k1 = f(y)
        k2 = f(y + h / 2 * k1)
        k3 = f(y + h / 2 * k2)
        k4 = f(y + h * k3)
        return y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)

    @jax.jit
    def interval(y: Any, h: Any) -> Any:
        return jax.lax.fori_loop(0, substeps, lambda _, v: rk4(v, h), y)

    ys = [jnp.asarray(y0, jnp.float32)]
    for a, b in itertools.pairwise(times):
        ys.append(interval(ys[-1], jnp.float32((b - a) / substeps)))
    return np.stack([np.asarray(y) for y in ys], axis=1)


@pytest.mark.parametrize(
    "version",
    present_cases(
        [("v011",), ("v020",)], relpath=lambda case: SERIES[case[0]].relative_to(FIXTURES).as_posix()
    ),
)
def test_a_component_array_theta_ports_and_its_neural_ode_fits_its_training_series(version: str) -> None:
    """SeriesForecast saves ``θ = ComponentArray(ps)`` (Lux 0.5 biases (n, 1) in v011, Lux 1's (n,) in
    v020). Ported, the network is checked against Lux's numpy forward, then run as the app runs it
    (a neural ODE from the first training point): it follows the 20 scaled training points of the
    Delhi climate series with a mean squared error of 0.06 (the series' variance is 0.95; staying at
    the first point gives 2.7; the weights read row-major instead of Julia's column-major give 1.6
    and 3.0, which the numpy forward, reading the same tree, could not tell)."""
    for path in (SERIES[version], SERIES_DATA):
        if not path.is_file():
            pytest.skip(str(absent_reason(path.relative_to(FIXTURES).as_posix())))
    from treexchange._port._componentarray import component_tree

    ps = component_tree(tx.load(SERIES[version], "θ"))
    assert ps.layer_1.weight.shape == (64, 4) and ps.layer_3.bias.size == 4
    model = tx.from_lux(SERIES[version], ps="θ", st=None, architecture=SERIES_TEXT)

    def swish(v: np.ndarray) -> np.ndarray:
        return v * _sigmoid(v)

    def lux_forward(x: np.ndarray) -> np.ndarray:
        for name, act in (("layer_1", swish), ("layer_2", swish), ("layer_3", lambda v: v)):
            layer = ps[name]
            x = act(np.asarray(layer.weight, np.float64) @ x + np.asarray(layer.bias).reshape(-1, 1))
        return x

    x = np.random.default_rng(0).standard_normal((4, 16))
    got = np.asarray(jax.vmap(model)(jnp.asarray(x.T, jnp.float32))).T
    np.testing.assert_allclose(got, lux_forward(x), rtol=1e-4, atol=1e-5)

    train = tx.load(SERIES_DATA, "train_df")
    names = [str(n) for n in train.fields["colindex"].fields["names"]]
    columns = dict(zip(names, (np.asarray(c, np.float64) for c in train.fields["columns"]), strict=True))
    t = columns["t"]
    y = np.stack([columns[n] for n in ("meantemp", "humidity", "wind_speed", "meanpressure")])
    fitted = _integrate(model, y[:, 0], t)
    mse = float(np.mean((fitted - y) ** 2))
    assert mse < 0.1, mse
    assert float(np.mean((y - y.mean(axis=1, keepdims=True)) ** 2)) > 0.9  # what a fit is measured against


# --- a Lux model inside an entry: tuple paths ---------------------------------------------------


def _spiral_inside(path: Path, form: str) -> tuple[Any, Any]:
    """The Lux docs' trained ps/st saved inside an entry, as training scripts keep them; the
    ``(ps, st)`` arguments that reach them."""
    ps, st = tx.load(SPIRAL, "ps_trained"), tx.load(SPIRAL, "st_trained")
    if form == "checkpoint":  # jldsave(path; ckpt = (; epoch, ps, st, loss))
        tx.save(path, ckpt=tx.NamedTuple(epoch=np.int64(25), ps=ps, st=st, loss=np.float32(0.005)))
        return ("ckpt", "ps"), "st"  # (the default st: the one beside ps)
    if form == "dict":  # Dict("model" => Dict("ps" => ps, "st" => st))
        tx.save(path, run={"model": {"ps": ps, "st": st}, "seed": np.int64(0)})
        return ("run", "model", "ps"), ("run", "model", "st")
    # a Vector of (ps, st) Tuples, one per run: positions count from 1
    tx.save(path, runs=[(ps, st), (ps, st)])
    return ("runs", 2, 1), ("runs", 2, 2)


@needs_spiral
@pytest.mark.parametrize(
    ("form", "target"),
    [("checkpoint", "equinox"), ("checkpoint", "linen"), ("dict", "nnx"), ("vector", "equinox")],
)
def test_a_lux_model_inside_an_entry_ports_from_its_path(form: str, target: str, tmp_path: Path) -> None:
    """ps and st inside a checkpoint NamedTuple, a Dict, a Vector of Tuples: the tuple paths port
    the tutorial's classifier with its numbers (loss, accuracy, per-sample probabilities)."""
    path = tmp_path / f"{form}.jld2"
    ps_path, st_path = _spiral_inside(path, form)
    parts = tx.from_lux(path, ps_path, st_path, SPIRAL_PARTS, target=target)
    x, y = spiral_data(seed=5)
    reference = lux_reference(tx.load(SPIRAL, "ps_trained"), x.astype(np.float64))
    assert_tutorial_numbers(run_parts(parts, target, x), y, reference)


@needs_spiral
def test_a_wrong_path_into_an_entry_names_what_is_there(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.jld2"
    _spiral_inside(path, "checkpoint")
    with pytest.raises(tx.ConversionError, match=r"ckpt has no 'params': it holds keys \['epoch', 'ps'"):
        tx.from_lux(path, ("ckpt", "params"), architecture=SPIRAL_PARTS)
    with pytest.raises(tx.ConversionError, match=r"ckpt\.ps has no 'cell': it holds keys \['lstm_cell'"):
        tx.from_lux(path, ("ckpt", "ps", "cell"), None, architecture=SPIRAL_PARTS)
    with pytest.raises(tx.ConversionError, match=r"ckpt\.epoch has no 'ps': it holds no entries"):
        tx.from_lux(path, ("ckpt", "epoch", "ps"), None, architecture=SPIRAL_PARTS)
    with pytest.raises(tx.ConversionError, match="two places"):
        tx.from_lux(path, ("ckpt", "ps"), ("ckpt", "ps", "lstm_cell"), architecture=SPIRAL_PARTS)
    vector = tmp_path / "vector.jld2"
    _spiral_inside(vector, "vector")
    with pytest.raises(tx.ConversionError, match=r"runs has no 3: it holds 2 elements \(positions count"):
        tx.from_lux(vector, ("runs", 3, 1), None, architecture=SPIRAL_PARTS)
    with pytest.raises(TypeError, match="tuple path beginning with"):
        tx.from_lux(vector, (2, 1), None, architecture=SPIRAL_PARTS)


@needs_spiral
def test_misfits_inside_an_entry_are_named_by_their_file_paths(tmp_path: Path) -> None:
    """The MismatchError of a wrong architecture names the arrays where the file has them
    (``ckpt.ps.lstm_cell.weight_i``, ``runs[2][1]…``), not a tuple's repr."""
    wrong = {"lstm_cell": "LSTMCell(2 => 16)", "classifier": "Dense(8 => 1, sigmoid)"}
    for form, where in (("checkpoint", "ckpt.ps"), ("dict", "run.model.ps"), ("vector", "runs[2][1]")):
        path = tmp_path / f"{form}.jld2"
        ps_path, st_path = _spiral_inside(path, form)
        with pytest.raises(tx.MismatchError) as info:
            tx.from_lux(path, ps_path, st_path, wrong)
        lines = str(info.value).splitlines()[1:]
        assert {line.split(":")[0].strip() for line in lines} == {
            f"{where}.lstm_cell.{name}" for name in ("weight_i", "weight_h", "bias")
        }, str(info.value)


@needs_spiral
def test_the_default_st_is_the_one_beside_ps(tmp_path: Path) -> None:
    """``st="st"`` with ``ps=("ckpt", "ps")`` is ``("ckpt", "st")``; a checkpoint without one says
    how to go on; ``st=None`` ports the parameters alone (the classifier has no state to need)."""
    ps = tx.load(SPIRAL, "ps_trained")
    path = tmp_path / "ps_only.jld2"
    tx.save(path, ckpt=tx.NamedTuple(ps=ps), st=tx.NamedTuple(unrelated=np.zeros(2)))
    with pytest.raises(tx.ConversionError, match=r"ckpt has no 'st'.*pass st=None") as info:
        tx.from_lux(path, ("ckpt", "ps"), architecture=SPIRAL_PARTS)
    assert info.value.path == ("ckpt",)
    parts = tx.from_lux(path, ("ckpt", "ps"), None, architecture=SPIRAL_PARTS)
    x, y = spiral_data(seed=6)
    assert_tutorial_numbers(run_parts(parts, "equinox", x), y, lux_reference(ps, x.astype(np.float64)))


# DEEPDIP-project/CoupledNODE.jl (bundled, Apache-2.0): a closure model for 2-D Navier-Stokes,
# src/models/cnn.jl with train_posteriori.jl's radii [3, 3], channels [2, 2], [tanh, identity], no bias.
# Its collocate/decollocate are the repository's own functions (no parameters): NoOpLayer stands in.
COUPLEDNODE = BUNDLED_DIR / "lux" / "couplednode_ns2d_trained_model_posteriori.jld2"
COUPLEDNODE_TEXT = """Chain(
    layer_1 = NoOpLayer(),
    layer_2 = Conv((7, 7), 2 => 2, tanh, pad=3, use_bias=false),  # 196 parameters
    layer_3 = Conv((7, 7), 2 => 2, pad=3, use_bias=false),  # 196 parameters
    layer_4 = NoOpLayer(),
)"""


def _lux_conv(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """Lux's ``Conv`` (``cross_correlation=false``: NNlib's convolution, the kernel flipped) of a
    Julia-order ``(W, H, C)`` image with a ``(kw, kh, C, O)`` kernel, in float64 loops."""
    k = w.shape[0]
    xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    flipped = w[::-1, ::-1]
    out = np.zeros((x.shape[0] + 2 * pad - k + 1, x.shape[1] + 2 * pad - k + 1, w.shape[3]))
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = np.tensordot(xp[i : i + k, j : j + k], flipped, axes=3)
    return out


def test_a_component_array_with_layers_without_parameters_ports_and_computes_luxs_convolutions() -> None:
    """``ComponentArray(ps)`` of a Chain whose first and last layers have no parameters stores each
    as an empty range (``layer_1 = 1:0``): it read as a length-0 array, and the port refused
    ("kind array float32 (0,) in file, no arrays in template"; per part: "ps entries ['layer_1',
    'layer_4'] hold arrays"). Read as the empty NamedTuple it stands for, the real trained model
    ports whole and per part, and computes Lux's convolutions of its weights."""
    from treexchange._port._componentarray import component_tree

    ps = component_tree(tx.load(COUPLEDNODE, "θ_posteriori"))
    assert ps.layer_1 == tx.NamedTuple() == ps.layer_4 and ps.layer_2.weight.shape == (7, 7, 2, 2)
    model = tx.from_lux(COUPLEDNODE, ps="θ_posteriori", architecture=COUPLEDNODE_TEXT)
    parts = tx.from_lux(
        COUPLEDNODE,
        ps="θ_posteriori",
        architecture={
            "layer_2": "Conv((7, 7), 2 => 2, tanh, pad=3, use_bias=false)",
            "layer_3": "Conv((7, 7), 2 => 2, pad=3, use_bias=false)",
        },
    )
    x = np.random.default_rng(2).standard_normal((12, 10, 2))  # Julia's (W, H, C)
    hidden = np.tanh(_lux_conv(x, np.asarray(ps.layer_2.weight, np.float64), 3))
    want = _lux_conv(hidden, np.asarray(ps.layer_3.weight, np.float64), 3)
    x_py = jnp.asarray(x.transpose(2, 1, 0), jnp.float32)  # (C, H, W): Julia's axes reversed
    got = np.asarray(model(x_py)).transpose(2, 1, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert np.abs(want).max() > 0.1  # (a real signal, not zeros)
    stepwise = np.asarray(parts["layer_3"](parts["layer_2"](x_py))).transpose(2, 1, 0)
    np.testing.assert_allclose(stepwise, want, rtol=1e-4, atol=1e-5)


def test_component_array_axes_spelled_as_an_ntuple_are_read() -> None:
    """Some JLD2 versions spell the axes parameter ``NTuple{1, Axis{…}}`` (DEEPDIP-project/
    NeuralNS-SciML-Tutorials' trained CNNs, tests/corpus_sources.md): read as ``Tuple{Axis{…}}`` is
    ("unknown ComponentArray axis np.int64(1)" before). Axes that are not one Axis are named."""
    from treexchange._errors import ConversionError
    from treexchange._port._componentarray import component_tree

    theta = tx.load(COUPLEDNODE, "θ_posteriori")
    params = theta.type.params
    axis = params[3].params[0]
    ntuple = tx.JuliaType("ComponentArrays.ComponentArray", [*params[:3], tx.JuliaType("NTuple", [1, axis])])
    data = theta.fields["data"]
    tree = component_tree(tx.JuliaStruct(ntuple, {"data": data}))
    np.testing.assert_array_equal(tree.layer_3.weight, component_tree(theta).layer_3.weight)
    two = tx.JuliaType("ComponentArrays.ComponentArray", [*params[:3], tx.JuliaType("NTuple", [2, axis])])
    with pytest.raises(ConversionError, match=r"axes of 2 dimensions for its one-dimensional data \(at θ\)"):
        component_tree(tx.JuliaStruct(two, {"data": data}), path=("θ",))
    odd = tx.JuliaType("ComponentArrays.ComponentArray", [*params[:3], axis])
    with pytest.raises(
        ConversionError, match=r"unknown ComponentArray axes ComponentArrays\.Axis\{.*: not a tuple"
    ):
        component_tree(tx.JuliaStruct(odd, {"data": data}))


def test_later_component_arrays_shaped1daxis_components_are_vectors_or_empty_layers() -> None:
    """Later ComponentArrays versions keep a vector's axis, ``ViewAxis{a:b, nothing,
    Shaped1DAxis{(n,)}}()``, and store a layer without parameters as ``ViewAxis{1:0, nothing,
    Shaped1DAxis{(0,)}}()`` (DEEPDIP-project/CoupledNODE_Benchmark.jl's checkpoints,
    tests/corpus_sources.md): a vector, and the empty NamedTuple (was a length-0 array)."""
    from treexchange._port._componentarray import component_tree

    def span(a: int, b: int) -> tx.JuliaStruct:
        return tx.JuliaStruct("UnitRange{Int64}", {"start": np.int64(a), "stop": np.int64(b)})

    def view(a: int, b: int, shape: tuple[int, ...], kind: str = "Shaped1DAxis") -> tx.Singleton:
        inner = tx.JuliaType(f"ComponentArrays.{kind}", [shape])
        return tx.Singleton(tx.JuliaType("ComponentArrays.ViewAxis", [span(a, b), None, inner]))

    dense = tx.JuliaType(
        "ComponentArrays.Axis",
        [tx.NamedTuple(weight=view(1, 6, (3, 2), "ShapedAxis"), bias=view(7, 9, (3,)))],
    )
    layer_2 = tx.Singleton(tx.JuliaType("ComponentArrays.ViewAxis", [span(1, 9), None, dense]))
    axis = tx.JuliaType("ComponentArrays.Axis", [tx.NamedTuple(layer_1=view(1, 0, (0,)), layer_2=layer_2)])
    params = ["Float64", 1, "Array{Float64,1}", tx.JuliaType("Tuple", [axis])]
    array = tx.JuliaStruct(
        tx.JuliaType("ComponentArrays.ComponentArray", params), {"data": np.arange(1.0, 10.0)}
    )
    tree = component_tree(array)
    assert tree.layer_1 == tx.NamedTuple() and list(tree.layer_2) == ["weight", "bias"]
    assert tree.layer_2.weight.tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    assert tree.layer_2.bias.tolist() == [7.0, 8.0, 9.0]


def test_float64_lux_weights_are_rounded_to_jaxs_float32_as_from_flux_does(tmp_path: Path) -> None:
    """Lux models trained in Float64 (SciML; SciML/ReservoirComputing.jl's ESN readout) were
    refused with "dtype float64 in file, float32 in template" and a fix, ``cast=True``, that
    from_lux has no argument for, while from_flux rounds to JAX's Float32 (docs/porting.md)."""
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((3, 4)), rng.standard_normal(3)
    path = tmp_path / "lux64.jld2"
    tx.save(path, ps=tx.NamedTuple(weight=w, bias=b), st=tx.NamedTuple())
    model = tx.from_lux(path, architecture="Dense(4 => 3)")
    assert model.weight.dtype == jnp.float32
    x = rng.standard_normal(4)
    np.testing.assert_allclose(
        np.asarray(model(jnp.asarray(x, jnp.float32))), w @ x + b, rtol=1e-5, atol=1e-6
    )


def test_float32_files_fill_the_float64_models_equinox_builds_under_x64(tmp_path: Path) -> None:
    """Under ``jax_enable_x64`` Equinox builds Float64 layers: a Float32 file (every Flux model,
    most Lux ones) was refused by from_lux and from_flux alike ("dtype float32 in file, float64
    in template", suggesting a ``cast=True`` neither has). The values widen exactly; a Float64
    file rounds to the Float32 parameters Flax builds (as without x64)."""
    rng = np.random.default_rng(4)
    w, b = rng.standard_normal((3, 4), np.float32), rng.standard_normal(3, np.float32)
    lux, flux = tmp_path / "lux32.jld2", tmp_path / "flux32.jld2"
    tx.save(lux, ps=tx.NamedTuple(weight=w, bias=b), st=tx.NamedTuple())
    tx.save(flux, model_state=tx.NamedTuple(layers=(tx.NamedTuple(weight=w, bias=b, σ=()),)))
    with jax.enable_x64(True):
        models = [
            tx.from_lux(lux, architecture="Dense(4 => 3)"),
            tx.from_flux(flux, "model_state", architecture="Chain(Dense(4 => 3))").layers[0],
        ]
        for model in models:
            assert model.weight.dtype == jnp.float64
            np.testing.assert_array_equal(np.asarray(model.weight), w.astype(np.float64))
            np.testing.assert_array_equal(np.asarray(model.bias), b.astype(np.float64))
        # Flax builds Float32 parameters under x64 too: a Float64 file rounds to them
        tx.save(
            lux,
            ps=tx.NamedTuple(weight=w.astype(np.float64) / 3, bias=b.astype(np.float64)),
            st=tx.NamedTuple(),
        )
        kernel = tx.from_lux(lux, architecture="Dense(4 => 3)", target="nnx").kernel[...]
        assert kernel.dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(kernel), (w.astype(np.float64) / 3).astype(np.float32).T)


def test_a_component_array_inside_an_entry_ports_from_its_tuple_path(tmp_path: Path) -> None:
    """SeriesForecast's real ``θ = ComponentArray(ps)``, kept in a checkpoint NamedTuple: the
    ported network computes Lux's numpy forward of the same tree."""
    source = SERIES["v020"]
    if not source.is_file():
        pytest.skip(str(absent_reason(source.relative_to(FIXTURES).as_posix())))
    from treexchange._port._componentarray import component_tree

    theta = tx.load(source, "θ")
    path = tmp_path / "checkpoint.jld2"
    tx.save(path, ckpt=tx.NamedTuple(θ=theta, epoch=np.int64(300)))
    model = tx.from_lux(path, ("ckpt", "θ"), None, architecture=SERIES_TEXT)
    ps = component_tree(theta)
    x = np.random.default_rng(1).standard_normal((4, 16))
    want = x
    for name, swish in (("layer_1", True), ("layer_2", True), ("layer_3", False)):
        layer = ps[name]
        want = np.asarray(layer.weight, np.float64) @ want + np.asarray(layer.bias).reshape(-1, 1)
        want = want * _sigmoid(want) if swish else want
    got = np.asarray(jax.vmap(model)(jnp.asarray(x.T, jnp.float32))).T
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_a_flat_parameter_vector_is_cut_in_the_order_of_lux_ps(tmp_path: Path) -> None:
    """SciML code often saves ``θ`` as a plain vector (``getdata`` of the ComponentArray, or
    ``destructure``'s ``p``; DEEPDIP-project/CoupledNODE_Benchmark.jl's ``θ::Vector{Float64}``,
    tests/corpus_sources.md): the ps arrays column-major, one after the other, in the NamedTuple's
    order. The bundled CoupledNODE model's vector, without its axes, ports to the model its
    ComponentArray ports to, in every target; a length that is not the architecture's is named."""
    from treexchange._errors import ConversionError

    flat = np.asarray(tx.load(COUPLEDNODE, "θ_posteriori").fields["data"])
    path = tmp_path / "theta.jld2"
    tx.save(path, θ=flat, ckpt=tx.NamedTuple(θ=flat.astype(np.float64)))
    x = jnp.asarray(np.random.default_rng(3).standard_normal((2, 10, 12)), jnp.float32)
    want = np.asarray(tx.from_lux(COUPLEDNODE, ps="θ_posteriori", architecture=COUPLEDNODE_TEXT)(x))
    got = tx.from_lux(path, ps="θ", st=None, architecture=COUPLEDNODE_TEXT)
    np.testing.assert_array_equal(np.asarray(got(x)), want)
    in_ckpt = tx.from_lux(path, ps=("ckpt", "θ"), st=None, architecture=COUPLEDNODE_TEXT)  # Float64, rounded
    np.testing.assert_array_equal(np.asarray(in_ckpt(x)), want)
    module, variables = tx.from_lux(path, ps="θ", st=None, architecture=COUPLEDNODE_TEXT, target="linen")
    batch = jnp.transpose(x, (1, 2, 0))[None]
    np.testing.assert_allclose(
        np.asarray(module.apply(variables, batch))[0], want.transpose(1, 2, 0), atol=1e-5
    )
    with pytest.raises(
        ConversionError, match=r"flat vector of 392 numbers; the architecture's parameters are 394"
    ):
        tx.from_lux(
            path,
            ps="θ",
            st=None,
            architecture=COUPLEDNODE_TEXT.replace("tanh, pad=3, use_bias=false", "tanh, pad=3"),
        )
    with pytest.raises(ConversionError, match="its parts cannot be told apart"):
        tx.from_lux(
            path,
            ps="θ",
            st=None,
            architecture={"layer_2": "Conv((7, 7), 2 => 2, tanh, pad=3, use_bias=false)"},
        )


@needs_spiral
def test_a_flat_vector_of_lux_0_5_cells_is_cut_as_lux_0_5_lays_them_out(tmp_path: Path) -> None:
    """Nothing in a flat vector names the Lux version; the recurrent cells' layouts differ (Lux 0.5:
    ``weight_i, weight_h, bias``; Lux 1: two biases), so the length decides when ``lux=`` is not
    given: the Lux docs' trained LSTMCell (Lux 0.5.23), flattened, ports to the model its ps
    NamedTuple ports to; with ``lux="1"`` it is refused by its length, the message naming the
    version whose length it is."""
    from treexchange._errors import ConversionError

    cell = tx.load(SPIRAL, "ps_trained")["lstm_cell"]
    path = tmp_path / "theta.jld2"
    tx.save(path, θ=np.concatenate([np.asarray(v).ravel(order="F") for v in cell.values()]))
    x = jnp.asarray(np.random.default_rng(4).standard_normal((5, 2)), jnp.float32)
    want = tx.from_lux(SPIRAL, ps=("ps_trained", "lstm_cell"), st=None, architecture="LSTMCell(2 => 8)")(x)
    got = tx.from_lux(path, ps="θ", st=None, architecture="LSTMCell(2 => 8)")(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    with pytest.raises(ConversionError, match="352 numbers; the architecture's parameters are 384") as e:
        tx.from_lux(path, ps="θ", st=None, architecture="LSTMCell(2 => 8)", lux="1")
    assert "the length of this architecture's ps in Lux 0.5 (lux='0.5'; lux='1' was given)" in str(e.value)


def test_a_parallel_without_connection_returns_its_branches_outputs(tmp_path: Path) -> None:
    """Lux's ``Parallel(nothing, …)`` (printed ``connection = nothing``) returns the branches'
    outputs as a tuple, as Flux's ``Parallel(tuple, …)``; it was an unknown connection."""
    rng = np.random.default_rng(8)
    f32 = np.float32
    w1, b1, w2, b2 = (rng.normal(size=s).astype(f32) for s in ((3, 2), (3,), (4, 2), (4,)))
    ps = tx.NamedTuple(layer_1=tx.NamedTuple(weight=w1, bias=b1), layer_2=tx.NamedTuple(weight=w2, bias=b2))
    st = tx.NamedTuple(layer_1=tx.NamedTuple(), layer_2=tx.NamedTuple())
    path = tmp_path / "heads.jld2"
    tx.save(path, ps=ps, st=st)
    text = "Parallel(connection = nothing, layer_1 = Dense(2 => 3, tanh), layer_2 = Dense(2 => 4))"
    model = tx.from_lux(path, architecture=text)
    x = rng.normal(size=2).astype(f32)
    first, second = model(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(first), np.tanh(w1 @ x + b1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(second), w2 @ x + b2, rtol=1e-5, atol=1e-6)
