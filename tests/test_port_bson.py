"""Acceptance (issue 20): old Flux models saved with BSON.jl, ported by ``tx.from_flux``.

Real files from public repositories (../shared/julia_fixtures/bson, catalog.json gives each one's
Flux version and reported accuracy), MNIST test images in the old ``Flux.Data.MNIST`` orientation
(tests/_mnist.py ``flux_data_mnist``). Accuracies are the catalog's recomputed numbers, to the image.
"""

from __future__ import annotations

import warnings
from typing import Any

import _flux_reference as ref
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _mnist import flux_data_mnist, julia_batch
from conftest import BUNDLED_DIR, present_cases, require_fixture, require_one_of_table
from test_bson_wild import MODEL_ZOO_CONV
from test_port_from_flux import TARGETS, _run

import treexchange as tx
from treexchange import ConversionError, JuliaStruct, NamedTuple
from treexchange._port._arch import parse_architecture
from treexchange._port._eqx_layers import Recurrence
from treexchange._port._fromflux import read_flux_source
from treexchange._port._statefill import state_from_params

# The JuliaCon 2020 model as Flux 0.10 printed it; the file's closure x -> reshape(x, :, size(x, 4))
# is written as what it computes, Flux.flatten.
DHAIRYA = (
    "Chain(Conv((3, 3), 1=>16, relu, pad=(1, 1)), MaxPool((2, 2)), "
    "Conv((3, 3), 16=>32, relu, pad=(1, 1)), MaxPool((2, 2)), "
    "Conv((3, 3), 32=>32, relu, pad=(1, 1)), MaxPool((2, 2)), flatten, Dense(288, 10), softmax)"
)


# The FluxML model-zoo MNIST convnet saved as a parameter list (``params=cpu.(params(model)) acc
# epoch_idx``), its architecture as Flux printed it then, and the accuracy stored beside it (which the
# port recomputes to the image): the file of ../shared (Flux 0.10), then the bundled one (Flux 0.11,
# tetsugps/julia).
PARAMETER_LISTS = {
    "bson/dhairya_juliacon2020_mnist_conv2_params.bson": (DHAIRYA, 0.9874),
    "bson/tetsugps_mnist_conv_params.bson": (MODEL_ZOO_CONV, 0.9928),
}


def _bson(name: str) -> str:
    return str(require_fixture(f"bson/{name}"))


def _accuracy(built: Any, target: str, images: np.ndarray, labels: np.ndarray) -> float:
    return float(np.mean(_run(built, target, images).argmax(axis=1) == labels))


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_tracker_era_mlp(target: str) -> None:
    """Flux 0.7, every parameter a Tracker.TrackedArray{Float64}: 0.9691 (its authors' number)."""
    images, labels = flux_data_mnist()
    built = tx.from_flux(_bson("ooshita_mlp_tracker_pretrained.bson"), "pretrained", target=target)
    flat = images.reshape(len(images), -1)  # hcat(vec.(imgs)...): column-major vec of each image
    assert _accuracy(built, target, flat, labels) == pytest.approx(0.9691, abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_flux_0_12_lenet(target: str) -> None:
    images, labels = flux_data_mnist()
    built = tx.from_flux(_bson("eliascarv_lenet_v3.bson"), "model", target=target)
    assert _accuracy(built, target, images, labels) == pytest.approx(0.9875, abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_flux_0_10_parameter_list_with_its_architecture(target: str) -> None:
    images, labels = flux_data_mnist()
    path, (architecture, accuracy) = require_one_of_table(PARAMETER_LISTS)
    built = tx.from_flux(path, "params", architecture=architecture, target=target)
    assert _accuracy(built, target, images, labels) == pytest.approx(accuracy, abs=1e-4)
    assert float(tx.load(path, "acc")) == pytest.approx(accuracy)  # what train.jl stored


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_flux_0_10_whole_model_with_a_closure_and_the_architecture(target: str) -> None:
    images, labels = flux_data_mnist()
    built = tx.from_flux(
        _bson("dhairya_juliacon2020_model_conv_chain.bson"), "model", architecture=DHAIRYA, target=target
    )
    assert _accuracy(built, target, images, labels) == pytest.approx(0.9874, abs=1e-4)


# The model as the Flux model zoo's conv.jl (2019) wrote it, which this model was trained from:
# keywords before the activation, sizes as products, the reshape closure for flatten.
ZOO_CODE = """Chain(
    Conv((3, 3), 1=>16, pad=(1,1), relu),
    MaxPool((2,2)),
    Conv((3, 3), 16=>32, pad=(1,1), relu),
    MaxPool((2,2)),
    Conv((3, 3), 32=>32, pad=(1,1), relu),
    MaxPool((2,2)),
    x -> reshape(x, :, size(x, 4)),
    Dense(3*3*32, 10),
    softmax,
)"""


def test_the_model_zoo_code_of_a_whole_model_is_its_architecture() -> None:
    """The code the model was written as ports it (each of keywords before a positional argument,
    ``3*3*32`` and the ``x -> reshape(x, :, size(x, 4))`` closure was refused): the same Layer tree
    as the printed text, and the same outputs."""
    assert parse_architecture(ZOO_CODE) == parse_architecture(DHAIRYA)
    path = _bson("dhairya_juliacon2020_model_conv_chain.bson")
    x = jnp.asarray(np.random.default_rng(3).random((2, 28, 28, 1), dtype=np.float32))
    from_code = tx.from_flux(path, "model", architecture=ZOO_CODE, target="nnx")
    printed = tx.from_flux(path, "model", architecture=DHAIRYA, target="nnx")
    np.testing.assert_array_equal(np.asarray(from_code(x)), np.asarray(printed(x)))


def test_the_whole_model_and_the_parameter_list_hold_the_same_weights() -> None:
    params_file = _bson("dhairya_juliacon2020_mnist_conv2_params.bson")
    _, from_params = read_flux_source(params_file, "params", DHAIRYA)
    _, from_model = read_flux_source(_bson("dhairya_juliacon2020_model_conv_chain.bson"), "model", DHAIRYA)
    for i in (0, 2, 4, 7):
        a, b = from_params["layers"][i], from_model["layers"][i]
        np.testing.assert_array_equal(a["weight"], b["weight"])
        np.testing.assert_array_equal(a["bias"], b["bias"])


def test_a_closure_that_spells_flatten_ports_without_architecture() -> None:
    """BSON.jl stored the closure's lowered code; it folds back into ``x -> reshape(x, :, size(x,
    4))``, the model zoo's flatten: the whole model ports with no architecture (it was refused
    "a closure is code") and computes what the printed text's port computes (98.74 % on MNIST,
    ``test_flux_0_10_whole_model_with_a_closure_and_the_architecture``). The code is matched,
    never run."""
    path = _bson("dhairya_juliacon2020_model_conv_chain.bson")
    closure = tx.load(path, "model")["1"][6]
    assert isinstance(closure, tx.Closure) and closure.code == "x -> reshape(x, :, size(x, 4))"
    layer, _ = read_flux_source(path, "model")
    assert layer == parse_architecture(DHAIRYA)
    x = jnp.asarray(np.random.default_rng(4).random((3, 28, 28, 1), dtype=np.float32))
    alone = tx.from_flux(path, "model", target="nnx")
    printed = tx.from_flux(path, "model", architecture=DHAIRYA, target="nnx")
    np.testing.assert_array_equal(np.asarray(alone(x)), np.asarray(printed(x)))


def test_a_closure_without_architecture_names_its_place_and_the_way_out() -> None:
    with pytest.raises(ConversionError) as err:
        tx.from_flux(_bson("geist_bayesgpt_decoder.bson"), "model")
    message = str(err.value)
    assert "layer 1 of the Chain" in message and "run.jl:51" in message and "architecture=" in message
    assert err.value.path == ("model", "layers", 1)


def test_a_julia_1_12_closure_type_names_its_place_and_the_way_out() -> None:
    """Julia ≥ 1.12 names an anonymous function's type after the function it was written in
    (rash0402/crlEPH-dlc's ``Main.VAEModel.#VAE##0#VAE##1``, a decoder's reshape, BSON of 2025): it
    was refused as "anonymous function … as function (not portable)", without where or what to do."""
    from treexchange._port._wholemodel import from_whole_model

    f32 = "Core.Array{Core.Float32,"
    dense = _positional(f"Flux.Dense{{NNlib.#relu,{f32}2}},{f32}1}}}}", np.ones((4, 2), np.float32),
                        np.zeros(4, np.float32), tx.Singleton("NNlib.#relu"))  # fmt: skip
    chain = _positional("Flux.Chain{Core.Tuple}", (dense, tx.Singleton("Main.VAEModel.#VAE##0#VAE##1")))
    with pytest.raises(ConversionError) as err:
        from_whole_model(chain, path=("model",))
    message = str(err.value)
    assert "#VAE##0#VAE##1" in message and "layer 2 of the Chain model" in message
    assert "architecture=" in message
    assert err.value.path == ("model", "layers", 2)


def test_gpu_arrays_are_no_weights() -> None:
    with pytest.raises(ConversionError, match=r"holds no weights \(GPU pointers\)"):
        tx.from_flux(_bson("deltadahl_vae_cuarray.bson"), "vae")


RECURRENT = ["canberkarc_polyroots_lstm.bson", "canberkarc_polyroots_rnn.bson"]


@pytest.mark.parametrize(
    ("target", "name"),
    present_cases([(t, n) for n in RECURRENT for t in TARGETS], relpath=lambda case: f"bson/{case[1]}"),
)
def test_recurrent_models_agree_with_the_reference(target: str, name: str) -> None:
    """Flux 0.12 Recur{LSTMCell}/Recur{RNNCell} + Dropout + Dense, on a batch of sequences."""
    path = _bson(name)
    layer, state = read_flux_source(path, "model")
    assert layer.kinds()[:3] == ["Chain", "LSTM" if "lstm" in name else "RNN", "Dropout"]
    x = np.random.default_rng(0).normal(size=(100, 7, 3)).astype(np.float32)  # Julia (in, L, B)
    expected = ref.forward(layer, state, x).transpose(2, 1, 0)  # (B, L, out)
    built = tx.from_flux(path, "model", target=target)
    xs = jnp.asarray(x.transpose(2, 1, 0))
    if target == "equinox":  # one sequence (L, in); the layers after the recurrence run per step

        def run(seq: Any) -> Any:
            for sub in built.layers:
                seq = sub(seq) if isinstance(sub, Recurrence) else jax.vmap(sub)(seq)
            return seq

        got = np.asarray(jax.vmap(run)(xs))
    elif target == "nnx":
        got = np.asarray(built(xs))
    else:
        got = np.asarray(built[0].apply(built[1], xs))
    np.testing.assert_allclose(got, expected, atol=1e-5)


PRINTED_0_12 = {  # what Flux 0.12's `show` prints for these models (σ of an RNNCell named unless identity)
    "canberkarc_polyroots_rnn.bson": "Chain(Recur(RNNCell(100, 25, tanh)), Dropout(0.2), "
    "Recur(RNNCell(25, 25, tanh)), Dropout(0.1), Dense(25, 100), Dropout(0.1), Dense(100, 100, σ))",
    "canberkarc_polyroots_lstm.bson": "Chain(Recur(LSTMCell(100, 25)), Dropout(0.2), "
    "Recur(LSTMCell(25, 25)), Dropout(0.1), Dense(25, 100), Dropout(0.1), Dense(100, 100, σ))",
}


@pytest.mark.parametrize("name", present_cases([(n,) for n in RECURRENT], relpath=lambda c: f"bson/{c[0]}"))
def test_flux_0_12_printed_recurrent_text_is_the_whole_model(name: str) -> None:
    """Flux 0.12 prints ``Recur(RNNCell(100, 25, tanh))``, sizes positional (it was "RNN size
    must be written `in => out`"): the text is the model the file's structs describe, and
    ``from_flux`` with it computes what the whole model computes."""
    path = _bson(name)
    layer, _ = read_flux_source(path, "model")
    text = PRINTED_0_12[name]
    assert parse_architecture(text).kinds() == layer.kinds()
    for got, want in zip(parse_architecture(text).walk(), layer.walk()):
        assert {k: v for k, v in got.args.items() if k in want.args} == {
            k: v for k, v in want.args.items() if k in got.args
        }
    x = np.random.default_rng(1).normal(size=(2, 4, 100)).astype(np.float32)  # (B, L, in)
    whole = tx.from_flux(path, "model", target="nnx")
    from_text = tx.from_flux(path, "model", target="nnx", architecture=text)
    np.testing.assert_array_equal(np.asarray(from_text(jnp.asarray(x))), np.asarray(whole(jnp.asarray(x))))


def test_parameter_list_errors_name_the_array() -> None:
    arch = parse_architecture("Chain(Dense(3 => 2, relu), Dense(2 => 1))")
    first = [np.ones((2, 3)), np.zeros(2)]
    with pytest.raises(ConversionError, match=r"parameter array 3 has size 2×2; .* weight of size 1×2"):
        state_from_params(arch, [*first, np.ones((2, 2)), np.zeros(1)], "0.15")
    with pytest.raises(ConversionError, match="takes 4 parameter arrays, the list has 5"):
        state_from_params(arch, [*first, np.ones((1, 2)), np.zeros(1), np.ones(1)], "0.15")
    with pytest.raises(ConversionError, match="ends at 2 arrays"):
        state_from_params(arch, [np.ones((2, 3)), np.zeros(2)], "0.15")


def _learnt_state0_state() -> NamedTuple:
    """A Flux ≤ 0.14 ``Flux.state`` of ``Chain(LSTM(3 => 4), RNN(4 => 2))`` whose ``Recur``s hold
    non-zero learnt initial states (``state0``; Flux ≤ 0.11 drew them at random), every array random."""
    from treexchange._port._eqx import build_equinox

    model = build_equinox(parse_architecture(LEARNT_STATE0), key=jax.random.key(0))
    state = tx.flux_state(model, flux="0.14")
    rng = np.random.default_rng(11)
    return jax.tree_util.tree_map(
        lambda a: rng.normal(size=a.shape).astype(np.float32) if isinstance(a, np.ndarray) else a, state
    )


LEARNT_STATE0 = "Chain(LSTM(3 => 4), RNN(4 => 2))"


@pytest.mark.parametrize("target", TARGETS)
def test_a_learnt_initial_state_is_carried(target: str, tmp_path: Any) -> None:
    """The ported layers start from the ``Recur``'s learnt ``state0`` (not from zeros, which changed
    the first steps' outputs): the numbers of the numpy Flux ≤ 0.14 reference, which starts from
    ``state0``; and the built model writes that ``state0`` back."""
    state = _learnt_state0_state()
    assert np.all(state["layers"][1]["cell"]["state0"] != 0)
    tx.save(tmp_path / "s.jld2", s=state)
    layer = parse_architecture(LEARNT_STATE0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing is dropped
        built = tx.from_flux(tmp_path / "s.jld2", "s", architecture=LEARNT_STATE0, target=target, flux="0.14")
    x = np.random.default_rng(12).normal(size=(3, 6, 5)).astype(np.float32)  # Julia (in, L, B)
    expected = ref.forward(layer, state, x).transpose(2, 1, 0)  # (B, L, out)
    xs = jnp.asarray(x.transpose(2, 1, 0))
    if target == "equinox":
        got = np.asarray(jax.vmap(built)(xs))
    elif target == "nnx":
        got = np.asarray(built(xs))
    else:
        got = np.asarray(built[0].apply(built[1], xs))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # Flux >= 0.15 has no state0: that state starts from zeros, said (survey 22: SebEyes/SLAM-RNN's
    # LSTM states, where tx.flux_state(flux="0.15") dropped it without a word, rel. error 1e-2)
    with pytest.warns(UserWarning, match=r"2 recurrent layers .*learnt initial state.*flux='0.14' keeps it"):
        latest = tx.flux_state(built)
    zero_start = ref.forward(layer, latest, x)  # Flux >= 0.15: from zeros
    assert np.abs(zero_start.transpose(2, 1, 0) - expected)[:, 0].max() > 1e-2  # the state0 matters
    back = tx.flux_state(built, flux="0.14")
    np.testing.assert_array_equal(back["layers"][1]["cell"]["state0"], state["layers"][1]["cell"]["state0"])
    for got_c, want_c in zip(back["layers"][0]["cell"]["state0"], state["layers"][0]["cell"]["state0"]):
        np.testing.assert_array_equal(got_c, want_c)
    # a Flux >= 0.15 state (no state0) restores into it and keeps the module's own learnt state
    again = tx.restore(latest, like=built, layout=tx.flux_state)
    assert tx.values_equal(tx.flux_state(again, flux="0.14"), back)


def test_old_era_structs_by_position() -> None:
    """BSON stores fields by position: a Flux 0.7 LSTM (Recur cell/init/state, cell h and c vectors)
    and a Flux 0.10 BatchNorm (7 fields) are recognised by their field count."""
    h, c = np.full(2, 0.25, np.float32), np.zeros(2, np.float32)
    cell = JuliaStruct("Flux.LSTMCell{A,V}", {"1": np.ones((8, 3)), "2": np.ones((8, 2)), "3": np.zeros(8),
                                             "4": h, "5": c})  # fmt: skip
    recur = JuliaStruct("Flux.Recur{Flux.LSTMCell}", {"1": cell, "2": (h, c), "3": (h, c)})
    arrays = [np.arange(3, dtype=np.float32) + k for k in range(4)]
    bn = JuliaStruct(
        "Flux.BatchNorm{Base.#identity,A,B,Core.Float32}",
        dict(zip("1234567", [tx.Singleton("Base.#identity"), *arrays, np.float32(1e-5), np.float32(0.1)])),
    )
    chain = JuliaStruct("Flux.Chain{Core.Tuple}", {"1": (recur, bn)})
    from treexchange._port._wholemodel import from_whole_model

    layer, state = from_whole_model(chain)
    assert layer.kinds() == ["Chain", "LSTM", "BatchNorm"]
    lstm, norm = state["layers"]
    assert list(lstm["cell"]) == ["Wi", "Wh", "b", "state0"] and lstm["cell"]["state0"][0].shape == (2, 1)
    assert layer.children[1].args["channels"] == 3
    assert list(norm)[-4:] == ["affine", "track_stats", "active", "chs"]
    np.testing.assert_array_equal(norm["σ²"], arrays[3])


# --- migrating to Flux.state + JLD2 (treexchange convert --flux-state) -------------------------------


def _cli(*argv: str) -> str:
    import contextlib
    import io

    from treexchange._cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return out.getvalue()


LENET_V3 = (
    "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)), "
    "Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
)


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_migrated_lenet_ports_back_to_the_same_accuracy(target: str, tmp_path: Any) -> None:
    new = tmp_path / "lenet.jld2"
    dry = _cli("convert", _bson("eliascarv_lenet_v3.bson"), str(new), "--flux-state", "--dry-run")
    assert "model.layers[6].weight <- model" in dry and f"model = {LENET_V3}" in dry
    assert not new.exists()
    _cli("convert", _bson("eliascarv_lenet_v3.bson"), str(new), "--flux-state")
    state = tx.load(new, "model")
    assert list(state["layers"][0]) == ["σ", "weight", "bias", "stride", "pad", "dilation", "groups"]
    assert list(state["layers"][1]) == ["k", "pad", "stride"]  # Flux ≥ 0.15: pools have fields
    images, labels = flux_data_mnist()
    built = tx.from_flux(new, "model", architecture=LENET_V3, target=target)
    assert _accuracy(built, target, images, labels) == pytest.approx(0.9875, abs=1e-4)


@pytest.mark.slow
def test_migrated_parameter_list_ports_back(tmp_path: Any) -> None:
    new = tmp_path / "conv2.jld2"
    path, (architecture, accuracy) = require_one_of_table(PARAMETER_LISTS)
    _cli("convert", str(path), str(new), "--flux-state", "--architecture", architecture)
    assert float(tx.load(new, "acc")) == pytest.approx(accuracy)  # other entries as they were
    images, labels = flux_data_mnist()
    built = tx.from_flux(new, "params", architecture=architecture)
    assert _accuracy(built, "equinox", images, labels) == pytest.approx(accuracy, abs=1e-4)


def test_migrate_eras_closures_and_users_structs(tmp_path: Any) -> None:
    """Flux ≤ 0.14 keeps a Recur's state0; a closure is () as in Flux.state; a user's struct
    (Main.Encoder) is its fields' states, as Flux.state of a functor."""
    lstm = tmp_path / "lstm.jld2"
    _cli("convert", _bson("canberkarc_polyroots_lstm.bson"), str(lstm), "--flux-state", "--flux", "0.14")
    recur = tx.load(lstm, "model")["layers"][0]
    assert list(recur) == ["cell", "state"] and list(recur["cell"]) == ["Wi", "Wh", "b", "state0"]
    current = tmp_path / "lstm15.jld2"
    _cli("convert", _bson("canberkarc_polyroots_lstm.bson"), str(current), "--flux-state")
    assert list(tx.load(current, "model")["layers"][0]["cell"]) == ["Wi", "Wh", "bias"]
    chain = tmp_path / "chain.jld2"
    _cli("convert", _bson("dhairya_juliacon2020_model_conv_chain.bson"), str(chain), "--flux-state")
    assert tx.load(chain, "model")["layers"][6] == ()
    vae = tmp_path / "vae.jld2"
    _cli("convert", _bson("cohrint_vae_mnist.bson"), str(vae), "--flux-state")
    encoder = tx.load(vae, "encoder")
    assert list(encoder["1"]) == ["weight", "bias", "σ"] and encoder["1"]["weight"].shape == (500, 784)


def test_migrate_a_whole_model_whose_closure_the_architecture_names(tmp_path: Any) -> None:
    """A closure with no code to read (Julia 0.6's BSON.jl, a JLD2 file's function type) leaves the
    Julia lines to the user; ``--architecture`` naming it (``Flux.flatten``) gives them, checked
    against the state (they said "build the model yourself ... pass architecture=" with the
    architecture given; AlphaGo.jl's Flux 0.5 heads, the ninth search)."""
    rng = np.random.default_rng(11)
    w, b = rng.normal(size=(2, 6)).astype(np.float32), rng.normal(size=2).astype(np.float32)
    dense = _positional("Flux.Dense{Base.#identity,Core.Array{Core.Float32,2},Core.Array{Core.Float32,1}}",
                        w, b, tx.Singleton("Base.#identity"))  # fmt: skip
    old = tmp_path / "old.jld2"
    tx.save(old, model=_positional("Flux.Chain{Core.Tuple}", (tx.Singleton("AlphaGo.##24#30"), dense)))
    new = tmp_path / "new.jld2"
    assert "build the model in Julia yourself" in _cli("convert", str(old), str(new), "--flux-state")
    said = _cli(
        "convert", str(old), str(new), "--flux-state", "--architecture", "Chain(Flux.flatten, Dense(6 => 2))"
    )
    assert "model = Chain(Flux.flatten, Dense(6 => 2))" in said and "yourself" not in said, said
    said = _cli(
        "convert", str(old), str(new), "--flux-state", "--architecture", "Chain(Flux.flatten, Dense(6 => 3))"
    )
    assert "--architecture is not this model (the architecture's Dense implies weight" in said, said
    np.testing.assert_array_equal(tx.load(new, "model")["layers"][1]["weight"], w)


def test_a_parameter_list_migrates_for_either_flux_era(tmp_path: Any) -> None:
    """The bundled model-zoo convnet's parameter list (its pools have no parameters): for Flux 0.14 a
    pool's state is ``()``, from Flux 0.15 its ``k``, ``pad``, ``stride``; both files port back to the
    very outputs of the BSON file's port, on real test images."""
    path = str(BUNDLED_DIR / "bson" / "tetsugps_mnist_conv_params.bson")
    images = flux_data_mnist()[0][:500]
    expected = np.asarray(jax.vmap(tx.from_flux(path, "params", architecture=MODEL_ZOO_CONV))(images))
    for flux, pool in (("0.14", ()), ("0.15", ["k", "pad", "stride"])):
        new = tmp_path / f"conv{flux}.jld2"
        _cli("convert", path, str(new), "--flux-state", "--flux", flux, "--architecture", MODEL_ZOO_CONV)
        layers = tx.load(new, "params")["layers"]
        assert [layers[i] if layers[i] == () else list(layers[i]) for i in (1, 3, 5)] == [pool] * 3
        built = tx.from_flux(new, "params", architecture=MODEL_ZOO_CONV, flux=flux)
        np.testing.assert_array_equal(np.asarray(jax.vmap(built)(images)), expected)


@pytest.mark.slow
def test_flux_0_13_resnet_style_model_with_batchnorm() -> None:
    """19 Conv(bias=false) + BatchNorm pairs, trained on PNGs read as img[row, col] (the old
    orientation): 98.62% in Equinox (no number reported by its author), and the reference agrees."""
    images, labels = flux_data_mnist()
    path = _bson("dylandeshler_mnist_bottleneck_bn.bson")
    built = tx.from_flux(path, "model")
    probs = _run(built, "equinox", images)
    assert float(np.mean(probs.argmax(axis=1) == labels)) == pytest.approx(0.9862, abs=5e-4)
    layer, state = read_flux_source(path, "model")
    expected = ref.forward(layer, state, julia_batch(images[:4]))
    np.testing.assert_allclose(probs[:4].T, expected, atol=1e-4)


def test_users_structs_and_dropped_initial_states_are_said_in_the_dry_run(tmp_path: Any) -> None:
    dry = _cli(
        "convert", _bson("cohrint_vae_mnist.bson"), str(tmp_path / "v.jld2"), "--flux-state", "--dry-run"
    )
    assert "encoder: holds structs of your own" in dry and "args: written as it is" in dry
    assert "decoder = Chain(Dense(2 => 500, tanh), Dense(500 => 784))" in dry


def _positional(type_: str, *values: Any) -> JuliaStruct:
    """A struct as BSON.jl stores it: fields by position (the reader names them "1", "2", ...)."""
    return JuliaStruct(type_, {str(i + 1): v for i, v in enumerate(values)})


def test_flux_0_8_era_structs_compute_what_flux_computed() -> None:
    """Conv{N,F,A,V} (no pad length, no groups), an 8-field BatchNorm, LayerNorm(Diagonal) and a Dense
    with W/b and a Flux.Zeros bias, by position, ported to Equinox and run against the reference."""
    rng = np.random.default_rng(3)

    def arr(*shape: int) -> np.ndarray:
        return rng.normal(size=shape).astype(np.float32)

    f32 = "Core.Array{Core.Float32,"
    relu, ident = tx.Singleton("NNlib.#relu"), tx.Singleton("Base.#identity")
    conv = _positional(
        f"Flux.Conv{{2,NNlib.#relu,{f32}4}},{f32}1}}}}", relu, arr(3, 3, 2, 4), arr(4),
        (np.int64(1), np.int64(1)), (np.int64(1), np.int64(1)), (np.int64(1), np.int64(1)),
    )  # fmt: skip
    norm = _positional(
        f"Flux.BatchNorm{{Base.#identity,{f32}1}},{f32}1}},Core.Float32}}", ident, arr(4), arr(4) + 2,
        arr(4), np.abs(arr(4)) + 0.5, np.float32(1e-5), np.float32(0.1), True,
    )  # fmt: skip
    flat = tx.Singleton("Flux.#flatten")
    dense = _positional(f"Flux.Dense{{NNlib.#relu,{f32}2}},Flux.Zeros}}", arr(6, 4 * 5 * 5), tx.JuliaStruct(
        "Flux.Zeros{Core.Float32,1}", {"1": (np.int64(6),)}), relu)  # fmt: skip
    diag = _positional(f"Flux.Diagonal{{{f32}1}}}}", arr(6) + 1, arr(6))
    layernorm = _positional(f"Flux.LayerNorm{{{f32}1}}}}", diag)
    chain = _positional("Flux.Chain{Core.Tuple}", (conv, norm, flat, dense, layernorm))
    from treexchange._port._wholemodel import from_whole_model

    layer, state = from_whole_model(chain, path=("model",))
    assert layer.kinds() == ["Chain", "Conv", "BatchNorm", "flatten", "Dense", "LayerNorm"]
    assert layer.children[3].args["bias"] is False and layer.children[4].args["ϵ"] == pytest.approx(1e-5)
    x = arr(5, 5, 2, 3)  # Julia (W, H, C, B)
    _equinox_with_state_computes_the_reference(layer, state, x)


def _equinox_with_state_computes_the_reference(layer: Any, state: Any, x: np.ndarray) -> None:
    """The Equinox port of ``layer`` (norm statistics in an ``eqx.nn.State``, inference mode)
    filled from the Flux ``state`` computes what the numpy reference of Flux 0.14 computes on ``x``."""
    import equinox as eqx

    from treexchange._port import load_state
    from treexchange._port._eqx import build_equinox

    expected = ref.forward(layer, state, x, flux="0.14")
    built = build_equinox(layer, key=jax.random.key(0), flux="0.14")
    built, eqx_state = load_state((built, eqx.nn.State(built)), state, flux="0.14")
    inference = eqx.nn.inference_mode(built)
    got = jax.vmap(lambda s: inference(s, eqx_state)[0])(jnp.asarray(julia_batch(x)))
    np.testing.assert_allclose(np.asarray(got).T, expected, rtol=1e-4, atol=1e-4)


def test_flux_0_5_and_0_6_structs_compute_what_flux_computed() -> None:
    """Flux 0.5.0-0.5.2's Conv had five fields (no ``dilation``), and Flux 0.4-0.6's BatchNorm kept
    the running *standard deviation* where later ones keep the variance (eight fields either way;
    test mode divided by it, adding no ϵ). A 5-field Conv was refused ("no Flux version's Conv has
    that layout"); a 0.6 BatchNorm would have been read as a variance. Told by ϵ = 1e-8 (Float64,
    those versions' default) or ``BatchNorm{F,V,N}``: σ² = σ.^2 .- ϵ. Real: tejank10/AlphaGo.jl's
    Flux 0.5.2 policy and value heads (the ninth search)."""
    rng = np.random.default_rng(7)

    def arr(*shape: int) -> np.ndarray:
        return rng.normal(size=shape).astype(np.float32)

    f32 = "Core.Array{Core.Float32,"
    relu, ident = tx.Singleton("NNlib.#relu"), tx.Singleton("Base.#identity")
    w, b = arr(3, 3, 2, 4), arr(4)
    conv = _positional(f"Flux.Conv{{2,Base.#identity,{f32}4}},{f32}1}}}}", ident, w, b,
                       (np.int64(1), np.int64(1)), (np.int64(1), np.int64(1)))  # fmt: skip
    beta, gamma, mu, std = arr(4), arr(4) + 2, arr(4), np.abs(arr(4)) + 0.5
    bn_type = f"Flux.BatchNorm{{NNlib.#relu,{f32}1}},{f32}1}},Core.Float64}}"
    norm = _positional(bn_type, relu, beta, gamma, mu, std, 1e-8, 0.1, True)
    wd, bd = arr(3, 4 * 5 * 5), arr(3)
    dense = _positional(f"Flux.Dense{{Base.#identity,{f32}2}},{f32}1}}}}", wd, bd, ident)
    chain = _positional("Flux.Chain", [conv, norm, tx.Singleton("Flux.#flatten"), dense])
    from treexchange._port._wholemodel import from_whole_model

    layer, state = from_whole_model(chain, path=("model",))
    assert layer.kinds() == ["Chain", "Conv", "BatchNorm", "flatten", "Dense"]
    bn = state["layers"][1]
    np.testing.assert_allclose(bn["σ²"] + 1e-8, std.astype(np.float64) ** 2, rtol=1e-6)
    x = arr(5, 5, 2, 3)  # Julia (W, H, C, B)
    # Flux 0.5's forward: a true convolution, then relu.(γ .* (y .- μ) ./ σ .+ β), then Dense
    y = ref.conv(x, w, pad=1) + b.reshape(1, 1, 4, 1)
    c = (1, 1, 4, 1)
    y = np.maximum(gamma.reshape(c) * (y - mu.reshape(c)) / std.reshape(c) + beta.reshape(c), 0)
    expected = wd.astype(np.float64) @ y.reshape(-1, 3, order="F") + bd[:, None]
    import equinox as eqx

    from treexchange._port import load_state
    from treexchange._port._eqx import build_equinox

    built = build_equinox(layer, key=jax.random.key(0), flux="0.14")
    built, eqx_state = load_state((built, eqx.nn.State(built)), state, flux="0.14")
    inference = eqx.nn.inference_mode(built)
    got = jax.vmap(lambda s: inference(s, eqx_state)[0])(jnp.asarray(julia_batch(x)))
    np.testing.assert_allclose(np.asarray(got).T, expected, rtol=1e-4, atol=1e-4)
    # Flux ≤ 0.5.1's BatchNorm{F,V,N}: μ and σ began as the numbers 0.0 and 1.0
    early = _positional(f"Flux.BatchNorm{{NNlib.#relu,{f32}1}},Core.Float64}}", relu, beta, gamma, 0.0, 1.0,
                        1e-5, 0.1, False)  # fmt: skip
    _, early_state = from_whole_model(_positional("Flux.Chain", [early]), path=("model",))
    np.testing.assert_allclose(early_state["layers"][0]["σ²"], np.full(4, 1 - 1e-5, np.float32))
    # Flux ≥ 0.7's (ϵ 1e-5, or any but 1e-8 as a Float64) keeps its variance as it is
    later = _positional(bn_type, relu, beta, gamma, mu, std, 1e-5, 0.1, True)
    _, later_state = from_whole_model(_positional("Flux.Chain", [later]), path=("model",))
    np.testing.assert_array_equal(later_state["layers"][0]["σ²"], std)


def _flux_0_4_file(path: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """A BSON.jl file as Flux 0.4 wrote one: ``Dense(σ, W, b)``, activation first, each parameter a
    ``TrackedArray`` of four fields ``(ref, f, data, grad)`` (Flux 0.3.4-0.4's); the arrays."""
    from treexchange._bson._writer import array, bson_file, datatype, primitive, struct as jl_struct

    f32 = datatype("Core.Float32")
    call = jl_struct(datatype("Flux.Tracker.Call", datatype("Core.Void"), datatype("Core.Tuple")), None, [])

    def tracked(a: np.ndarray) -> dict[str, Any]:
        type_ = datatype("Flux.Tracker.TrackedArray", f32, a.ndim, datatype("Core.Array", f32, a.ndim))
        ref0 = primitive(datatype("Core.UInt32"), bytes(4))
        return jl_struct(type_, ref0, call, array("Core.Float32", a), array("Core.Float32", np.zeros_like(a)))

    arrays = [rng.normal(size=s).astype(np.float32) for s in ((4, 3), (4,), (2, 4), (2,))]

    def dense(act: str, w: np.ndarray, b: np.ndarray) -> dict[str, Any]:
        tracked_type = "Flux.Tracker.TrackedArray"
        params = [datatype(tracked_type, f32, n, datatype("Core.Array", f32, n)) for n in (2, 1)]
        type_ = datatype("Flux.Dense", datatype(act), *params)
        return jl_struct(type_, jl_struct(datatype(act)), tracked(w), tracked(b))

    layers = [dense("NNlib.#relu", *arrays[:2]), dense("Base.#identity", *arrays[2:])]
    path.write_bytes(bson_file({"model": jl_struct(datatype("Flux.Chain"), layers)}))
    return arrays


def test_flux_0_4_dense_and_tracked_arrays_compute_what_flux_computed(tmp_path: Any) -> None:
    """Flux 0.3.4-0.4 (Julia 0.6, early 2018) stored a TrackedArray as (ref, f, data, grad), not
    0.5's (tracker, data, grad): the reader took the second field, the Tracker.Call, for the weights
    (no array left in the file, silently, for load and convert). Its Dense was (σ, W, b), activation
    first: refused as "no array field 'weight'". Now the data is the third of four fields and the
    Dense is told by its first field being a function; σ.(W*x .+ b) never changed."""
    w1, b1, w2, b2 = _flux_0_4_file(tmp_path / "m.bson", np.random.default_rng(11))
    loaded = tx.load(tmp_path / "m.bson")["model"].fields["1"]
    np.testing.assert_array_equal(loaded[0].fields["2"], w1)
    np.testing.assert_array_equal(loaded[1].fields["3"], b2)
    layer, state = read_flux_source(tmp_path / "m.bson", "model")
    assert layer.kinds() == ["Chain", "Dense", "Dense"]
    assert list(state["layers"][0]) == ["weight", "bias", "σ"]
    x = np.random.default_rng(12).normal(size=(3, 5)).astype(np.float32)
    expected = w2.astype(np.float64) @ np.maximum(w1 @ x + b1[:, None], 0) + b2[:, None]
    for target in ("equinox", "nnx"):
        got = _run(tx.from_flux(tmp_path / "m.bson", "model", target=target), target, x.T)
        np.testing.assert_allclose(np.asarray(got).T, expected, rtol=1e-5, atol=1e-5)
    # Flux 0.5's three-field TrackedArray and later Denses are read as before
    kept = _positional("Flux.Dense{NNlib.#relu,A,B}", w1, b1, tx.Singleton("NNlib.#relu"))
    from treexchange._port._wholemodel import from_whole_model

    _, later = from_whole_model(kept, path=("m",))
    np.testing.assert_array_equal(later["weight"], w1)
    # Flux 0.3-0.4's cells were built of Dense layers; the GRUCell's four fields read as
    # (Wi, Wh, b, state0) gave "no array field 'Wi'": each is now named for what it is
    relu = tx.Singleton("NNlib.#relu")
    gate = _positional("Flux.Dense{NNlib.#σ,A,B}", tx.Singleton("NNlib.#σ"), np.ones((2, 5)), np.zeros(2))
    cells = {
        "GRUCell": (gate, gate, gate, np.zeros(2)),
        "LSTMCell": (gate, gate, gate, gate, np.zeros(2), np.zeros(2)),
        "RNNCell": (
            _positional("Flux.Dense{NNlib.#relu,A,B}", relu, np.ones((2, 5)), np.zeros(2)),
            np.zeros(2),
        ),
    }
    for kind, fields in cells.items():
        recur = _positional(
            "Flux.Recur", _positional(f"Flux.{kind}{{Flux.Dense,A}}", *fields), np.zeros(2), np.zeros(2)
        )
        with pytest.raises(
            ConversionError, match=rf"Flux 0.3-0.4's {kind}, built of Dense layers .*\(at m.cell\)"
        ):
            from_whole_model(recur, path=("m",))


def test_flux_0_12_dev_norms_with_chs_first_compute_what_flux_computed() -> None:
    """Flux's master between 0.11 and 0.12 (0.12.0-dev, early 2021) stored BatchNorm as (chs, λ, β, γ, μ,
    σ², ϵ, momentum, affine, track_stats, active) and GroupNorm as (chs, G, λ, …): 11 and 12 fields as
    0.12's, chs first (FishAres/WorldModels' cvae decoder, BSON of 2021-02). It was read in 0.12's order
    (a TypeError inside a ConversionError); now by what the fields hold, and written in 0.12's order."""
    rng = np.random.default_rng(5)

    def arr(*shape: int) -> np.ndarray:
        return rng.normal(size=shape).astype(np.float32)

    f32 = "Core.Array{Core.Float32,"
    relu = tx.Singleton("NNlib.#relu")
    norm_type = f"{{NNlib.#relu,{f32}1}},Core.Float32,{f32}1}}}}"
    stats = (np.float32(1e-5), np.float32(0.1), True, True, None)
    ident = tx.Singleton("Base.#identity")
    dense = _positional(f"Flux.Dense{{Base.#identity,{f32}2}},{f32}1}}}}", arr(8, 3), arr(8), ident)
    batchnorm = _positional(f"Flux.BatchNorm{norm_type}", np.int64(8), relu, arr(8), arr(8) + 2, arr(8),
                            np.abs(arr(8)) + 0.5, *stats)  # fmt: skip
    groupnorm = _positional(f"Flux.GroupNorm{norm_type}", np.int64(8), np.int64(2), relu, arr(8), arr(8) + 1,
                            None, None, np.float32(1e-5), np.float32(0.1), True, False, None)  # fmt: skip
    chain = _positional("Flux.Chain{Core.Tuple}", (dense, batchnorm, groupnorm))
    from treexchange._port._wholemodel import from_whole_model

    layer, state = from_whole_model(chain, path=("model",))
    assert layer.kinds() == ["Chain", "Dense", "BatchNorm", "GroupNorm"]
    assert layer.children[1].args["channels"] == 8 and layer.children[2].args["groups"] == 2
    bn_state, gn_state = state["layers"][1], state["layers"][2]
    names = ["λ", "β", "γ", "μ", "σ²", "ϵ", "momentum", "affine", "track_stats", "active", "chs"]
    assert list(bn_state) == names
    assert list(gn_state)[:2] == ["G", "λ"] and list(gn_state)[-1] == "chs" and gn_state["chs"] == 8
    np.testing.assert_array_equal(bn_state["μ"], batchnorm.fields["5"])
    x = arr(3, 4)
    _equinox_with_state_computes_the_reference(layer, state, x)
    # 0.12's own order (chs last) is still read as before
    kept = [batchnorm.fields[str(i)] for i in range(3, 12)]
    released = _positional(f"Flux.BatchNorm{norm_type}", relu, *kept, np.int64(8))
    _, released_state = from_whole_model(_positional("Flux.Chain{Core.Tuple}", (released,)), path=("model",))
    assert tx.values_equal(released_state["layers"][0], bn_state)


def test_malformed_old_structs_are_conversion_errors() -> None:
    from treexchange._port._wholemodel import from_whole_model

    with pytest.raises(ConversionError, match="no Flux version's Dense has that layout"):
        from_whole_model(_positional("Flux.Dense{NNlib.#relu,A,B}", np.ones((2, 2))), path=("m",))
    relu = tx.Singleton("NNlib.#relu")
    weight, bias = np.ones((3, 3, 1, 2)), np.ones(2)
    bad_conv = _positional("Flux.Conv{2,2,NNlib.#relu,A,B}", relu, weight, bias, "stride?", (1, 1), (1, 1))
    with pytest.raises(ConversionError, match=r"lacks what the layer needs .* \(at m\)"):
        from_whole_model(bad_conv, path=("m",))


def test_a_model_as_deep_as_the_reader_allows_is_walked_without_recursion_errors() -> None:
    from treexchange._port._statefill import whole_model_state
    from treexchange._port._wholemodel import from_whole_model

    value: Any = _positional(
        "Flux.Dense{NNlib.#relu,A,B}", np.ones((2, 2), np.float32), np.zeros(2, np.float32), None
    )
    for _ in range(250):  # a Chain is two levels (struct, tuple): 500 of the reader's 512
        value = _positional("Flux.Chain{Core.Tuple}", (value,))
    layer, _ = from_whole_model(value)
    assert len(layer.kinds()) == 251
    state = whole_model_state(value, "0.15")
    for _ in range(250):
        state = state["layers"][0]
    assert list(state) == ["weight", "bias", "σ"]


@pytest.mark.slow
def test_migrated_tracker_mlp_ports_back(tmp_path: Any) -> None:
    new = tmp_path / "mlp.jld2"
    dry = _cli("convert", _bson("ooshita_mlp_tracker_pretrained.bson"), str(new), "--flux-state", "--dry-run")
    text = "Chain(Dense(784 => 32, relu), Dense(32 => 32, relu), Dense(32 => 10), softmax)"
    assert f"pretrained = {text} |> f64" in dry
    _cli("convert", _bson("ooshita_mlp_tracker_pretrained.bson"), str(new), "--flux-state")
    assert tx.load(new, "pretrained")["layers"][0]["weight"].dtype == np.float64  # as the model was
    images, labels = flux_data_mnist()
    built = tx.from_flux(new, "pretrained", architecture=text)
    flat = images.reshape(len(images), -1)
    assert _accuracy(built, "equinox", flat, labels) == pytest.approx(0.9691, abs=1e-4)
