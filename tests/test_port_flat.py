"""``tx.from_flux`` of a flat parameter vector: ``p, re = Flux.destructure(model)``.

``destructure`` concatenates the model's trainable arrays, each column-major (``vec``), in the
order Functors walks them (that of ``Flux.params``); ``re`` is an ``Optimisers.Restructure(model,
offsets, length)`` and ``re(p)`` the model with ``p``'s numbers. Files in the wild save both
(``jldsave(f; metadata = p, rebuild = re)``, tristanth03/UROP, tests/corpus_sources.md) or ``p``
alone. Real trained models (bundled) are flattened here as ``destructure`` does and must classify
MNIST exactly as the model they came from.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from _mnist import flux_data_mnist, mnist_test_set
from conftest import BUNDLED_DIR, require_fixture

import treexchange as tx
from treexchange import ConversionError
from treexchange._port._arch import parse_architecture
from treexchange._port._statefill import params_from_flat, state_from_params
from treexchange._values import JuliaStruct, NamedTuple

LENET = (
    "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)), "
    "Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
)


def _predict(model: Any, images: np.ndarray) -> np.ndarray:
    run = jax.jit(jax.vmap(model))
    return np.concatenate(
        [np.asarray(run(images[i : i + 2500])).argmax(1) for i in range(0, len(images), 2500)]
    )


def _vec(arrays: list[np.ndarray]) -> np.ndarray:
    """``destructure``'s vector: every array column-major (Julia's ``vec``), one after the other."""
    return np.concatenate([np.asarray(a).ravel(order="F") for a in arrays])


def test_the_flat_vector_of_a_real_lenet_ports_with_its_architecture(tmp_path: Path) -> None:
    """silver-bullet's trained LeNet (Flux.state, bundled): its weights and biases, layer by layer,
    flattened as ``destructure`` does; ported with the architecture, it predicts every MNIST test
    image as the state ported the usual way (97.89 %, the figure the README's demo prints)."""
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    state = tx.load(path, "lenet_state")
    arrays = [a for layer in state["layers"] if "weight" in layer for a in (layer["weight"], layer["bias"])]
    assert len(arrays) == 10
    out = tmp_path / "p.jld2"
    tx.save(out, p=_vec(arrays))
    images, labels = mnist_test_set()
    predicted = _predict(tx.from_flux(out, "p", architecture=LENET), images)
    np.testing.assert_array_equal(
        predicted, _predict(tx.from_flux(path, "lenet_state", architecture=LENET), images)
    )
    assert float(np.mean(predicted == labels)) == pytest.approx(0.9789, abs=1e-12)


def _zeroed(value: Any) -> Any:
    if isinstance(value, JuliaStruct):
        return JuliaStruct(value.type, {k: _zeroed(v) for k, v in value.fields.items()}, layout=value.layout)
    if isinstance(value, tuple):
        return tuple(_zeroed(v) for v in value)
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return np.zeros_like(value)
    return value


def _float_arrays(value: Any) -> list[np.ndarray]:
    """A model's float arrays in field order (for Conv and Dense: weight, bias; Functors' order)."""
    if isinstance(value, JuliaStruct):
        return [a for v in value.fields.values() for a in _float_arrays(v)]
    if isinstance(value, tuple):
        return [a for v in value for a in _float_arrays(v)]
    return [value] if isinstance(value, np.ndarray) and value.dtype.kind == "f" else []


def test_a_restructure_is_rebuilt_from_its_flat_vector_not_from_the_model_it_holds(tmp_path: Path) -> None:
    """AndreyGermanov/phones_reader digits.bson (MIT, bundled: a whole LeNet of Flux ≥ 0.13, 0.9846
    on MNIST). Saved as ``destructure`` leaves it for ``jldsave(f; p, re)``, with the model inside
    ``re`` zeroed (``re`` keeps the model as it was when destructured; the trained numbers are
    ``p``'s): ``from_flux(f, "re", flat="p")`` is ``re(p)`` and scores 0.9846 again; ``re`` alone is
    refused, naming ``flat=``; its own model is the zeroed one."""
    model = tx.load(BUNDLED_DIR / "bson" / "germanov_phones_reader_digits.bson", "model")
    flat = _vec(_float_arrays(model))
    assert flat.size == 44426
    offsets = NamedTuple(layers=())  # (the port reads the model's layers, not re's offsets)
    restructure = JuliaStruct(
        "Optimisers.Restructure{Flux.Chain, NamedTuple}",
        {"model": _zeroed(model), "offsets": offsets, "length": flat.size},
    )
    path = tmp_path / "destructured.jld2"
    tx.save(path, p=flat, re=restructure)
    images, labels = flux_data_mnist()
    accuracy = float(np.mean(_predict(tx.from_flux(path, "re", flat="p"), images) == labels))
    assert accuracy == pytest.approx(0.9846, abs=1e-12)
    with pytest.raises(ConversionError, match=r"Optimisers.Restructure .*flat='p'") as refused:
        tx.from_flux(path, "re")
    assert "('re', 'model')" in str(refused.value)
    zeroed = float(np.mean(_predict(tx.from_flux(path, ("re", "model")), images) == labels))
    assert zeroed < 0.2
    # BSON.jl keeps no field names: the model is the Restructure's first field
    positional = JuliaStruct("Optimisers.Restructure", {"1": _zeroed(model), "2": offsets, "3": flat.size})
    tx.save(path, p=flat, re=positional)
    assert float(np.mean(_predict(tx.from_flux(path, "re", flat="p"), images[:500]) == labels[:500])) > 0.95


def test_a_whole_model_and_a_flat_vector_of_another_size_are_refused(tmp_path: Path) -> None:
    dense = JuliaStruct(
        "Flux.Dense{Base.#tanh, Array{Float32, 2}, Array{Float32, 1}}",
        {
            "weight": np.ones((2, 3), np.float32),
            "bias": np.zeros(2, np.float32),
            "σ": JuliaStruct("Base.#tanh", {}),
        },
    )
    path = tmp_path / "m.jld2"
    tx.save(path, model=dense, p=np.arange(8, dtype=np.float32), q=np.arange(9, dtype=np.float32))
    ported = tx.from_flux(path, "model", flat="p")
    np.testing.assert_array_equal(np.asarray(ported.layer.weight), np.arange(6).reshape(3, 2).T)
    with pytest.raises(ConversionError, match=r"9 numbers; the model's parameters are 8: .*\(at q\)"):
        tx.from_flux(path, "model", flat="q")
    with pytest.raises(ConversionError, match="is no flat parameter vector"):
        tx.from_flux(path, "p", flat="model")
    with pytest.raises(ConversionError, match="with architecture=, pass the flat vector itself as the name"):
        tx.from_flux(path, "model", "Chain(Dense(3 => 2, tanh))", flat="p")
    with pytest.raises(ConversionError, match=r"'p' is a flat vector of 8 numbers .*architecture="):
        tx.from_flux(path, "p")
    ported = tx.from_flux(path, "p", "Chain(Dense(3 => 2, tanh))")
    x = np.array([1.0, -1.0, 0.5], np.float32)
    w = np.arange(6, dtype=np.float32).reshape(3, 2).T  # Julia's reshape(p[1:6], 2, 3)
    np.testing.assert_allclose(np.asarray(ported(x)), np.tanh(w @ x + np.array([6.0, 7.0])), rtol=1e-6)


def test_a_recurrent_models_vector_length_tells_whether_its_initial_states_are_in_it() -> None:
    """Flux ≤ 0.14's recurrent cells train their ``state0`` (it is in ``Flux.params`` and in
    ``destructure``'s vector, after the cell's bias); Flux ≥ 0.15's have none. Only those two
    lengths are read; the era follows."""
    layer = parse_architecture("Chain(RNN(2 => 3), Dense(3 => 1))")
    required = 3 * 2 + 3 * 3 + 3 + 1 * 3 + 1
    arrays, initial = params_from_flat(layer, np.arange(float(required)))
    assert not initial
    assert [a.shape for a in arrays] == [(3, 2), (3, 3), (3,), (1, 3), (1,)]
    arrays, initial = params_from_flat(layer, np.arange(required + 3.0))
    assert initial
    assert [a.shape for a in arrays] == [(3, 2), (3, 3), (3,), (3,), (1, 3), (1,)]
    np.testing.assert_array_equal(arrays[3], [18.0, 19.0, 20.0])  # state0: after Wi, Wh, b
    state = state_from_params(layer, arrays, "0.14", initial_states=True)
    np.testing.assert_array_equal(np.ravel(state["layers"][0]["cell"]["state0"]), [18.0, 19.0, 20.0])
    with pytest.raises(
        ConversionError,
        match=r"has 23 numbers; the model's parameters are 22 \(25 in Flux ≤ 0.14's layout, with the",
    ):
        params_from_flat(layer, np.arange(23.0))
    # Without the states, a layer of the size of one (LayerNorm(3) after the RNN) is not taken for it
    layer = parse_architecture("Chain(RNN(2 => 3), LayerNorm(3))")
    arrays, initial = params_from_flat(layer, np.arange(24.0))
    state = state_from_params(layer, arrays, "0.15", initial_states=initial)
    np.testing.assert_array_equal(state["layers"][1]["diag"]["scale"], [18.0, 19.0, 20.0])


def test_convert_flux_state_writes_the_state_of_re_of_p_and_of_a_flat_vector_with_architecture(
    tmp_path: Path,
) -> None:
    """``treexchange convert --flux-state``: ``re`` becomes the ``Flux.state`` of ``re(p)`` (``p``:
    the file's one vector of ``re.length`` numbers), each array named with the range of ``p`` it
    was cut from; with two candidate vectors ``re`` is written as it is, saying why; a vector with
    ``--architecture`` becomes that model's state when its length is the model's parameter count."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    model = tx.load(BUNDLED_DIR / "bson" / "germanov_phones_reader_digits.bson", "model")
    arrays = _float_arrays(model)
    flat = _vec(arrays)
    restructure = JuliaStruct(
        "Optimisers.Restructure{Flux.Chain, NamedTuple}",
        {"model": _zeroed(model), "offsets": NamedTuple(layers=()), "length": flat.size},
    )
    source = tmp_path / "destructured.jld2"
    tx.save(source, p=flat, re=restructure, loss=np.arange(3.0))
    printed = io.StringIO()
    migrate_flux_state(source, tmp_path / "dry.jld2", dry_run=True, out=printed)
    lines = printed.getvalue().splitlines()
    assert "re.layers[1].weight <- p[1:150]  (5, 5, 1, 6) float32" in lines
    assert "re.layers[8].bias <- p[44417:44426]  (10,) float32" in lines
    assert not (tmp_path / "dry.jld2").exists()
    migrate_flux_state(source, tmp_path / "state.jld2", out=io.StringIO())
    state = tx.load(tmp_path / "state.jld2")
    written = [state["re"]["layers"][i][k] for i in (0, 2, 5, 6, 7) for k in ("weight", "bias")]
    for got, want in zip(written, arrays, strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(state["p"], flat)  # the vector itself: written as it is
    tx.save(source, p=flat, q=flat + 1, re=restructure)
    printed = io.StringIO()
    roots = migrate_flux_state(source, tmp_path / "two.jld2", out=printed)
    assert (
        "re: written as it is (an Optimisers.Restructure, Flux.destructure's re: the file holds 2 vectors"
        in (printed.getvalue())
    )
    assert isinstance(roots["re"], JuliaStruct)
    tx.save(source, p=np.arange(8, dtype=np.float32), loss=np.arange(3.0))
    printed = io.StringIO()
    roots = migrate_flux_state(
        source, tmp_path / "flat.jld2", architecture="Chain(Dense(3 => 2, tanh))", out=printed
    )
    np.testing.assert_array_equal(roots["p"]["layers"][0]["weight"], [[0, 2, 4], [1, 3, 5]])
    np.testing.assert_array_equal(roots["loss"], np.arange(3.0))
    assert "loss: written as it is (a vector, not this model's flat parameters" in printed.getvalue()


def test_learnt_initial_states_in_a_vector_are_never_dropped_silently(tmp_path: Path) -> None:
    """A vector whose length shows Flux ≤ 0.14's trainable ``state0`` is refused with
    ``flux="0.15"`` (whose layers have none: the port would start from zeros), and ``convert
    --flux-state`` for Flux ≥ 0.15 names each learnt initial state it leaves out, as it does for a
    whole model."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    text = "Chain(RNN(2 => 3), Dense(3 => 1))"
    path = tmp_path / "p.jld2"
    tx.save(path, p=np.arange(1.0, 26.0, dtype=np.float32))  # 22 parameters + 3 of state0
    assert tx.from_flux(path, "p", text) is not None
    with pytest.raises(ConversionError, match=r"initial states .* flux='0.14'"):
        tx.from_flux(path, "p", text, flux="0.15")
    printed = io.StringIO()
    migrate_flux_state(path, tmp_path / "new.jld2", architecture=text, out=printed)
    assert (
        "p.layers[1].cell.state0: a learnt initial state, not part of Flux >= 0.15's state"
        in printed.getvalue()
    )
    printed = io.StringIO()
    roots = migrate_flux_state(path, tmp_path / "old.jld2", architecture=text, flux="0.14", out=printed)
    assert "learnt initial state" not in printed.getvalue()
    np.testing.assert_array_equal(np.ravel(roots["p"]["layers"][0]["cell"]["state0"]), [19.0, 20.0, 21.0])


def test_what_is_not_a_flat_vector_and_a_closure_in_re_are_named(tmp_path: Path) -> None:
    """An integer vector or a matrix given with an architecture says why it is no flat vector (not
    "Chain expects a `layers` entry"); a ``re`` whose model holds a closure names the route that
    ports it (the vector as the name, the layers as text)."""
    closure = JuliaStruct("Main.#3#4", {})
    dense = JuliaStruct(
        "Flux.Dense{NNlib.#relu, Array{Float32, 2}, Array{Float32, 1}}",
        {
            "weight": np.zeros((2, 3), np.float32),
            "bias": np.zeros(2, np.float32),
            "σ": JuliaStruct("NNlib.#relu", {}),
        },
    )
    chain = JuliaStruct("Flux.Chain{Tuple{Main.#3#4, Flux.Dense}}", {"layers": (closure, dense)})
    re_ = JuliaStruct(
        "Optimisers.Restructure{Flux.Chain, NamedTuple}", {"model": chain, "offsets": (), "length": 8}
    )
    path = tmp_path / "m.jld2"
    tx.save(path, re=re_, p=np.ones(8, np.float32), ints=np.arange(8), matrix=np.ones((2, 4), np.float32))
    with pytest.raises(ConversionError, match=r"tx.from_flux\(path, 'p', architecture='Chain\(…\)'\)"):
        tx.from_flux(path, "re", flat="p")
    for name, what in (("ints", r"int64 \(8,\)"), ("matrix", r"float32 \(2, 4\)")):
        with pytest.raises(
            ConversionError, match=rf"'{name}' is an array of {what}, not a model's state; a flat"
        ):
            tx.from_flux(path, name, "Chain(Dense(3 => 2, relu))")


def test_paths_reach_a_vector_of_vectors_a_bson_struct_by_position_and_a_component(tmp_path: Path) -> None:
    """Real files keep flat vectors inside other values (tests/corpus_sources.md): HugoMelchers/
    neural-closure-models saves ``params`` as a ``Vector{Vector{Float32}}`` (a ``JuliaArray``);
    killah-t-cell/Plasma.jl a BSON struct ``res`` whose fields BSON stores by position; a Lux
    ``ComponentArray`` names its parts only in its type. A path reaches each, ``("params", 2)``,
    ``("res", 1)`` (field ``"1"``), ``("θ", "layer_2")`` (before: "has no 2: it holds no entries")."""
    from treexchange._bson._writer import array, bson_file, datatype, struct

    text = "Chain(Dense(3 => 2, tanh))"
    elements = np.empty(2, object)  # (a Vector whose elements are Vector{Float32}s)
    elements[0], elements[1] = np.zeros(8, np.float32), np.arange(8, dtype=np.float32)
    vectors = tx.JuliaArray("Array{Float32, 1}", elements)
    path = tmp_path / "params.jld2"
    tx.save(path, params=vectors)
    assert isinstance(tx.load(path, "params"), tx.JuliaArray)
    x = np.array([1.0, -1.0, 0.5], np.float32)
    want = np.tanh(np.arange(6, dtype=np.float32).reshape(3, 2).T @ x + [6.0, 7.0])
    np.testing.assert_allclose(np.asarray(tx.from_flux(path, ("params", 2), text)(x)), want, rtol=1e-6)
    raw = bson_file(
        {"res": struct(datatype("Optim.Result"), array(None, np.arange(8, dtype=np.float32)), 3.0)}
    )
    (tmp_path / "res.bson").write_bytes(raw)
    np.testing.assert_allclose(
        np.asarray(tx.from_flux(tmp_path / "res.bson", ("res", 1), text)(x)), want, rtol=1e-6
    )
    couplednode = BUNDLED_DIR / "lux" / "couplednode_ns2d_trained_model_posteriori.jld2"
    conv = "Conv((7, 7), 2 => 2, tanh, pad=3, use_bias=false)"
    part = tx.from_lux(couplednode, ps=("θ_posteriori", "layer_2"), st=None, architecture=conv)
    parts = {"layer_2": conv, "layer_3": "Conv((7, 7), 2 => 2, pad=3, use_bias=false)"}
    whole = tx.from_lux(couplednode, ps="θ_posteriori", architecture=parts)["layer_2"]
    image = np.random.default_rng(5).standard_normal((2, 9, 9)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(part(image)), np.asarray(whole(image)))


def test_the_real_flat_vectors_of_a_neuralpde_model_port_by_position(tmp_path: Path) -> None:
    """killah-t-cell/Plasma.jl 1D1V_weights.bson (MIT, bundled): ``@save "1D1V_weights.bson"
    prepared_weights``, the trained Float64 parameter vectors of NeuralPDE's
    ``FastChain(FastDense(3, 16, σ), FastDense(16, 16, σ), FastDense(16, 1))`` and of its 2-input
    twin, in a ``Vector{Any}``. ``FastDense`` keeps ``W`` column-major then ``b`` (DiffEqFlux's
    ``reshape(p[1:out*in], out, in)``), as ``destructure`` does for a Dense: each vector, reached
    by its position, ports with the Flux text and computes the float64 numpy MLP of its numbers
    (rounded to Float32), and ``convert --flux-state --dry-run`` maps each array to its range. The
    repository's own ``FastChain`` text ports as that Chain (it was an unknown layer)."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    path = BUNDLED_DIR / "bson" / "plasma_1d1v_weights.bson"
    vectors = tx.load(path, "prepared_weights")
    assert [v.shape for v in vectors] == [(353,), (337,)] and vectors[0].dtype == np.float64
    rng = np.random.default_rng(6)
    spread = []
    for position, n_in in ((1, 3), (2, 2)):
        p = vectors[position - 1]
        text = f"Chain(Dense({n_in} => 16, σ), Dense(16 => 16, σ), Dense(16 => 1))"
        if position == 1:  # (the repository's own text: DiffEqFlux's FastChain reads as this Chain)
            text = "DiffEqFlux.FastChain(FastDense(3, 16, σ), FastDense(16, 16, σ), FastDense(16, 1))"
        model = tx.from_flux(path, ("prepared_weights", position), text)
        x = rng.standard_normal((64, n_in))
        h = x
        start = 0
        for rows, cols, last in ((16, n_in, False), (16, 16, False), (1, 16, True)):
            w = p[start : start + rows * cols].reshape((rows, cols), order="F")
            b = p[start + rows * cols : start + rows * cols + rows]
            start += rows * cols + rows
            h = h @ w.T + b
            h = h if last else 1 / (1 + np.exp(-np.clip(h, -500, 500)))
        assert start == p.size
        got = np.asarray(jax.vmap(model)(x.astype(np.float32)))
        # (large trained weights: Float32 rounding, measured against the outputs' scale)
        np.testing.assert_allclose(got, h, rtol=0, atol=1e-5 * float(np.abs(h).max()) + 1e-6)
        spread.append(float(np.ptp(h)))
    assert spread[0] > 1.0  # (the first net computes something, not a constant; the second is ~1e-11)
    printed = io.StringIO()
    text = "Chain(Dense(3 => 16, σ), Dense(16 => 16, σ), Dense(16 => 1))"
    roots = migrate_flux_state(path, tmp_path / "state.jld2", architecture=text, out=printed)
    lines = printed.getvalue().splitlines()  # the 3-input net's vector becomes its state, the other stays
    assert "prepared_weights[2]: written as it is (not this model's flat parameters: the flat" in lines[1]
    assert lines[-1].endswith('JLD2.load("' + str(tmp_path / "state.jld2") + '", "prepared_weights")[1])')
    written = tx.load(tmp_path / "state.jld2", "prepared_weights")
    np.testing.assert_array_equal(written[0]["layers"][2]["bias"], vectors[0][-1:])
    np.testing.assert_array_equal(written[1], vectors[1])
    assert isinstance(roots["prepared_weights"], list)


def test_re_of_p_keeps_the_running_statistics_and_odd_vectors_migrate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``re(p)`` puts ``p``'s numbers into the trainable arrays and keeps the rest of ``re``'s model:
    BatchNorm's running ``μ``/``σ²`` come from the model (they were reset to 0 and 1). A BSON
    Restructure (fields by position) names its model field as it is stored, ``"1"``. ``convert
    --flux-state`` unwraps a Tracker vector and cuts a length both eras share by ``--flux``."""
    from treexchange._interop._fluxmigrate import migrate_flux_state
    from treexchange._port._fromflux import read_source

    bn = JuliaStruct(
        "Flux.BatchNorm{Base.#identity, Array{Float32, 1}, Float32, Array{Float32, 1}}",
        {
            "λ": JuliaStruct("Base.#identity", {}), "β": np.zeros(2, np.float32), "γ": np.ones(2, np.float32),
            "μ": np.array([5.0, 6.0], np.float32), "σ²": np.array([4.0, 9.0], np.float32),
            "ϵ": np.float32(1e-5), "momentum": np.float32(0.1), "affine": True, "track_stats": True,
            "active": None, "chs": 2,
        },
    )  # fmt: skip
    chain = JuliaStruct("Flux.Chain{Tuple{Flux.BatchNorm}}", {"layers": (bn,)})
    re_ = JuliaStruct(
        "Optimisers.Restructure{Flux.Chain, NamedTuple}", {"model": chain, "offsets": (), "length": 4}
    )
    path = tmp_path / "bn.jld2"
    tx.save(path, re=re_, p=np.array([1.0, 2.0, 3.0, 4.0], np.float32))
    with warnings.catch_warnings():  # (re(p) has the model's statistics: nothing to warn of)
        warnings.simplefilter("error")
        _, state, _ = read_source(path, "re", None, flux=None, flat="p")
    layer = state["layers"][0]
    assert [layer[k].tolist() for k in ("β", "γ", "μ", "σ²")] == [[1, 2], [3, 4], [5, 6], [4, 9]]
    roots = migrate_flux_state(path, tmp_path / "state.jld2", out=io.StringIO())
    assert roots["re"]["layers"][0]["μ"].tolist() == [5, 6]
    assert capsys.readouterr().err == ""
    # p alone with the architecture: the statistics are Flux's initial ones, which is said
    with pytest.warns(UserWarning, match=r"1 BatchNorm layer \(p\.layers\[1\]\) starts from Flux's initial"):
        tx.from_flux(path, "p", architecture="Chain(BatchNorm(2))")
    migrate_flux_state(path, tmp_path / "p.jld2", architecture="Chain(BatchNorm(2))", out=io.StringIO())
    assert "note: 1 BatchNorm layer (p.layers[1]) starts from" in capsys.readouterr().err
    positional = JuliaStruct("Optimisers.Restructure", {"1": chain, "2": (), "3": 4})
    tx.save(path, re=positional, p=np.ones(4, np.float32))
    with pytest.raises(ConversionError, match=r"tx.from_flux\(path, \('re', '1'\)\)"):
        tx.from_flux(path, "re")
    tracked = JuliaStruct(
        "Tracker.TrackedArray{Float32, 1, Array{Float32, 1}}",
        {"tracker": None, "data": np.arange(8, dtype=np.float32), "grad": np.zeros(8, np.float32)},
    )
    tx.save(path, p=tracked, q=np.arange(1.0, 14.0, dtype=np.float32))
    printed = io.StringIO()
    roots = migrate_flux_state(
        path, tmp_path / "t.jld2", architecture="Chain(Dense(3 => 2, tanh))", out=printed
    )
    np.testing.assert_array_equal(roots["p"]["layers"][0]["weight"], [[0, 2, 4], [1, 3, 5]])
    for era, rows in (("0.14", 2), ("0.15", 3)):  # a GRUv3 of one unit: 13 numbers in either layout
        roots = migrate_flux_state(
            path, tmp_path / "g.jld2", architecture="Chain(GRUv3(2 => 1))", flux=era, out=io.StringIO()
        )
        assert roots["q"]["layers"][0]["cell"]["Wh"].shape == (rows, 1)


def test_the_jld2_dry_run_lists_an_array_stored_once_once(tmp_path: Path) -> None:
    from treexchange._interop._convert import stored_arrays
    from treexchange._interop._source import lazy_tree

    w = np.ones((2, 3), np.float32)
    tx.save(tmp_path / "shared.jld2", a=NamedTuple(x=w, y=w), b=np.zeros(2))
    assert [path for path, _ in stored_arrays(lazy_tree(tmp_path / "shared.jld2"))] == [("a", "x"), ("b",)]
