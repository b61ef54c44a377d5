"""Old Flux files found in public repositories beyond ../shared (tests/corpus_sources.md, "BSON and
model files found in the wild"): the general rules each one showed missing, on the one bundled file
whose licence allows it and on synthetic files of the same structure (each names the real file)."""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import equinox as eqx
import h5py
import jax
import numpy as np
import pytest
from _mnist import flux_data_mnist
from conftest import BUNDLED_DIR

import treexchange as tx
from treexchange import ConversionError, WrongFormatError
from treexchange._bson._writer import array, backref, bson_file, datatype, struct, symbol, tuple_
from treexchange._juliatype import where_type
from treexchange._values import same_type

# The FluxML model-zoo MNIST convnet (vision/mnist/conv.jl of 2019-2020), as Flux prints it.
MODEL_ZOO_CONV = (
    "Chain(Conv((3, 3), 1 => 16, relu, pad=(1, 1)), MaxPool((2, 2)), "
    "Conv((3, 3), 16 => 32, relu, pad=(1, 1)), MaxPool((2, 2)), "
    "Conv((3, 3), 32 => 32, relu, pad=(1, 1)), MaxPool((2, 2)), Flux.flatten, "
    "Dense(288 => 10), softmax)"
)


def _write(tmp_path: Path, name: str, entries: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_bytes(bson_file(entries))
    return str(path)


def test_a_parameter_list_of_the_model_zoo_convnet_reaches_the_accuracy_stored_beside_it() -> None:
    """tetsugps/julia mnist_conv.bson (Flux 0.11, ``params=cpu.(params(model)) acc epoch_idx``):
    the port with the model-zoo architecture scores the ``acc`` the training loop stored, to the image."""
    path = BUNDLED_DIR / "bson" / "tetsugps_mnist_conv_params.bson"
    images, labels = flux_data_mnist()
    model = jax.jit(jax.vmap(tx.from_flux(path, "params", architecture=MODEL_ZOO_CONV)))
    predicted = np.concatenate(
        [np.asarray(model(images[i : i + 2500])).argmax(1) for i in range(0, 10000, 2500)]
    )
    assert float(np.mean(predicted == labels)) == pytest.approx(float(tx.load(path, "acc")), abs=1e-12)


def _zygote_params(arrays: list[Any], *, buffer: bool) -> dict[str, Any]:
    """``Flux.params(model)`` saved as it is (``BSON.@save "p.bson" params=params(model)``): a
    ``Params`` whose ``order`` holds the arrays in the model's order (in a ``Zygote.Buffer`` from
    Zygote 0.4 on) and whose ``params`` ``IdSet`` holds them again in hash order.
    Real: Eduardorib/FashionMNIST-Julia mnist_conv.bson (blob 83932b06, commit 5cd271c6c6: a
    LeNet-5, ``Zygote.Params{Zygote.Buffer{Any, Vector{Any}}}``) and Dunque/BlockRecognizer
    mymodel.bson (``Zygote.Params``)."""
    docs = [array(None, a) if isinstance(a, np.ndarray) else a for a in arrays]  # (or documents)
    vector = datatype("Core.Array", datatype("Core.Any"), 1)
    order: Any = (
        struct(datatype("Zygote.Buffer", datatype("Core.Any"), vector), docs, False) if buffer else docs
    )
    shuffled = docs[::-1]
    iddict = struct(
        datatype("Base.IdDict", datatype("Core.Any"), datatype("Core.Nothing")), shuffled, [None] * len(docs)
    )
    idset = struct(datatype("Zygote.IdSet", datatype("Core.Any")), iddict)
    return struct(datatype("Zygote.Params", *([datatype("Zygote.Buffer")] if buffer else [])), order, idset)


@pytest.mark.parametrize("buffer", [True, False], ids=["zygote-buffer", "vector"])
def test_a_saved_params_object_is_a_parameter_list_in_its_order(tmp_path: Path, buffer: bool) -> None:
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=s).astype(np.float32) for s in ((4, 6), (4,), (3, 4), (3,))]
    path = _write(tmp_path, "params.bson", {"weights": _zygote_params(arrays, buffer=buffer)})
    with pytest.raises(ConversionError, match=r"'weights' is a parameter list \(Params.*architecture="):
        tx.from_flux(path, "weights")
    model = tx.from_flux(path, "weights", architecture="Chain(Dense(6 => 4, relu), Dense(4 => 3))")
    x = rng.normal(size=6).astype(np.float32)
    expected = arrays[2] @ np.maximum(arrays[0] @ x + arrays[1], 0) + arrays[3]
    np.testing.assert_allclose(np.asarray(model(x)), expected, rtol=1e-5, atol=1e-6)


def test_the_dry_run_maps_a_params_arrays_from_its_order_not_its_idset(tmp_path: Path) -> None:
    """BSON.jl stores a ``Params``' arrays once, each referred to from ``order`` and from the
    hash-ordered ``IdSet`` (backrefs, one object each when read). ``convert --flux-state --dry-run``
    named each array's source by the last path it met, ``params['2']['1'].keys[10]`` (the IdSet's
    positions, which say nothing of the layers); it names the first, the place in ``order``.
    Real: guilhermealvesc/cnn-vgg19-cifar10 cifar10_conv.bson (blob 345e7913)."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    arrays = [np.full(s, i, np.float32) for i, s in enumerate(((4, 6), (4,), (3, 4), (3,)))]
    refs = [backref(i) for i in range(1, 5)]
    params = _zygote_params(refs, buffer=True)  # (the IdSet holds the same references, reversed)
    path = tmp_path / "p.bson"
    path.write_bytes(bson_file({"params": params}, [array(None, a) for a in arrays]))
    printed = io.StringIO()
    text = "Chain(Dense(6 => 4, relu), Dense(4 => 3))"
    migrate_flux_state(path, tmp_path / "s.jld2", architecture=text, dry_run=True, out=printed)
    lines = [line for line in printed.getvalue().splitlines() if " <- " in line]
    assert lines[0] == "params.layers[1].weight <- params['1']['1'][1]  (4, 6) float32"
    assert lines[-1] == "params.layers[2].bias <- params['1']['1'][4]  (3,) float32"


def test_a_parameter_list_with_batchnorm_warns_that_its_statistics_are_flux_initial_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """guilhermealvesc/cnn-vgg19-cifar10 cifar10_conv.bson (blob 345e7913, ``BSON.@save "…"
    params = ps época acu`` of a CNN with five ``BatchNorm``s): a ``Params`` holds the trainable
    arrays only, so the port's BatchNorms start from μ = 0, σ² = 1, not the statistics learnt in
    training: in test mode the port computes another function than the trained model. It ported
    without a word; ``from_flux`` warns and ``convert --flux-state`` notes it on stderr, naming
    the layers. Without a BatchNorm, neither."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    rng = np.random.default_rng(3)
    # Flux.params of Chain(Dense(3 => 4; bias=false), BatchNorm(4, relu), Dense(4 => 2)): W, β, γ, W, b
    arrays = [rng.normal(size=s).astype(np.float32) for s in ((4, 3), (4,), (4,), (2, 4), (2,))]
    path = _write(tmp_path, "p.bson", {"params": _zygote_params(arrays, buffer=True), "acu": 0.85})
    text = "Chain(Dense(3 => 4; bias=false), BatchNorm(4, relu), Dense(4 => 2))"
    with pytest.warns(
        UserWarning, match=r"1 BatchNorm layer \(params\.layers\[2\]\) starts from Flux's initial"
    ) as said:
        model, state = tx.from_flux(path, "params", architecture=text)
    assert [w.filename for w in said] == [__file__]  # (the caller's line: where from_flux was called)
    x = rng.normal(size=3).astype(np.float32)
    eps = 1e-5  # (Flux's initial statistics in test mode: (h - 0) / sqrt(1 + ϵ) γ + β)
    hidden = np.maximum((arrays[0] @ x) / np.sqrt(1 + eps) * arrays[2] + arrays[1], 0)
    testmode = eqx.nn.inference_mode(model)
    np.testing.assert_allclose(np.asarray(testmode(x, state)[0]), arrays[3] @ hidden + arrays[4], rtol=1e-5)
    migrate_flux_state(path, tmp_path / "state.jld2", architecture=text, out=io.StringIO())
    note = capsys.readouterr().err
    assert note.startswith("treexchange convert: note: 1 BatchNorm layer (params.layers[2]) starts from")
    assert "the whole model or its Flux.state holds them" in note
    # Five, as in the real file: the first five named, a sixth counted
    text6 = "Chain(Dense(3 => 4; bias=false), " + ", ".join(["BatchNorm(4, relu)"] * 6) + ", Dense(4 => 2))"
    six = [arrays[0], *[a for _ in range(6) for a in arrays[1:3]], arrays[3], arrays[4]]
    path6 = _write(tmp_path, "p6.bson", {"params": _zygote_params(six, buffer=False)})
    with pytest.warns(
        UserWarning, match=r"6 BatchNorm layers \(params\.layers\[2\], .*layers\[6\] and 1 more\) start"
    ):
        tx.from_flux(path6, "params", architecture=text6)
    # No BatchNorm: no warning, no note
    plain = _write(
        tmp_path, "mlp.bson", {"params": _zygote_params([arrays[0], arrays[3], arrays[4]], buffer=True)}
    )
    mlp = "Chain(Dense(3 => 4, relu; bias=false), Dense(4 => 2))"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tx.from_flux(plain, "params", architecture=mlp)
    migrate_flux_state(plain, tmp_path / "mlp.jld2", architecture=mlp, out=io.StringIO())
    assert capsys.readouterr().err == ""


def test_a_fieldless_layer_stored_as_its_type_alone_ports(tmp_path: Path) -> None:
    """``GlobalMeanPool()`` has no fields, so BSON.jl stores it like a function (a struct without
    data, read as a Singleton). Real: HanyangHe/Bitstream-Computing-Hackathon mymodel.bson (blob
    95f5426e, Flux 0.12: ``Chain(Chain(Conv, BatchNorm, ...), Chain(GlobalMeanPool(), flatten,
    Dense, Dense))``)."""
    rng = np.random.default_rng(1)
    w = rng.normal(size=(1, 1, 2, 4)).astype(np.float32)  # Julia Conv weight (k, k, in, out)
    b = rng.normal(size=4).astype(np.float32)
    wd = rng.normal(size=(3, 4)).astype(np.float32)
    bd = rng.normal(size=3).astype(np.float32)
    f32 = datatype("Core.Float32")
    conv_t = datatype(
        "Flux.Conv",
        2,
        4,
        datatype("NNlib.#relu"),
        datatype("Core.Array", f32, 4),
        datatype("Core.Array", f32, 1),
    )
    conv = struct(conv_t, struct(datatype("NNlib.#relu")), array(None, w), array(None, b),
                  tuple_(1, 1), tuple_(0, 0, 0, 0), tuple_(1, 1), 1)  # fmt: skip
    pool = struct(datatype("Flux.GlobalMeanPool"))
    flatten = struct(datatype("Flux.#flatten"))
    dense = struct(datatype("Flux.Dense", datatype("Base.#identity")), array(None, wd), array(None, bd),
                   struct(datatype("Base.#identity")))  # fmt: skip
    chain = struct(datatype("Flux.Chain", datatype("Core.Tuple")), tuple_(conv, pool, flatten, dense))
    path = _write(tmp_path, "model.bson", {"model": chain})
    assert isinstance(tx.load(path, "model")["1"][1], tx.Singleton)
    model = tx.from_flux(path, "model")
    x = rng.normal(size=(2, 5, 6)).astype(np.float32)  # one sample, channels first
    hidden = np.maximum(np.einsum("co,chw->ohw", w[0, 0], x) + b[:, None, None], 0).mean(axis=(1, 2))
    np.testing.assert_allclose(np.asarray(model(x)), wd @ hidden + bd, rtol=1e-5, atol=1e-6)


def test_a_where_type_parameter_compares_equal_to_the_unionall_value_jld2_gives() -> None:
    """BSON reads ``ModelFrame{…, GLM.LinearModel}`` (a UnionAll parameter) as a where type; the same
    type read back from the JLD2 file ``convert`` writes has the ``UnionAll`` value there. They are
    one Julia type, so ``convert``'s read-back check must find them equal. Real:
    sebkaz/Julia_Deploy 02_Model/reg.bson (a GLM ``TableRegressionModel``, blob 1022a12c)."""
    bounds = {"lb": tx.Singleton("Core.Type{Union{}}"), "ub": tx.Singleton("Core.Type{Core.Any}")}
    typevar = tx.JuliaStruct("Core.TypeVar", {"name": tx.Symbol("T"), **bounds})
    bson_side = where_type(
        tx.JuliaStruct("Core.UnionAll", {"var": typevar, "body": tx.JuliaType.parse("Main.Foo{T}")})
    )
    jld2_side = tx.JuliaStruct(
        "Core.UnionAll", {"var": typevar, "body": tx.Singleton("Core.Type{Main.Foo{T}}")}
    )
    outer_b = tx.JuliaType("Main.Frame", (bson_side,))
    outer_j = tx.JuliaType("Main.Frame", (jld2_side,))
    assert str(outer_b) == str(outer_j) == "Main.Frame{Main.Foo{T} where T}"
    assert same_type(outer_b, outer_j)
    assert tx.values_equal(tx.JuliaStruct(outer_b, {"x": 1}), tx.JuliaStruct(outer_j, {"x": 1}))
    assert not same_type(outer_b, tx.JuliaType.parse("Main.Frame{Main.Foo{Int64}}"))


def test_where_types_bounded_by_a_union_convert_to_jld2(tmp_path: Path) -> None:
    """samartho4/2nd_round checkpoints/bayesian_models.bson (blob 767f56c5): an MCMCChains info
    holds ``OrderedDict{VarName{sym, T} where T where sym, Symbol}``, whose ``T <: Union{typeof(identity),
    IndexLens, …}``. BSON.jl stores that ``Union`` as a struct of its members; read as one (``a``,
    ``b``), and each TypeVar's bounds typed by the first TypeVar written (``ub`` a DataType), JLD2
    conversion was refused: "another instance of TypeVar made 'ub' a Core.DataType". A Union value
    is the type ``Type{Union{…}}``, as a datatype is, and a TypeVar's ``lb``/``ub`` are declared
    ``Any`` in Julia (JLD2 stores references): it converts, verified."""
    from treexchange._cli import main

    def typevar(name: str, ub: Any) -> dict[str, Any]:
        return struct(datatype("Core.TypeVar"), symbol(name), {"tag": "jl_bottom_type"}, ub)

    tail = struct(datatype("Core.Union"), datatype("Core.Nothing"), datatype("Core.String"))
    union = struct(datatype("Core.Union"), datatype("Core.Int64"), tail)
    sym, t = typevar("sym", datatype("Core.Any")), typevar("T", union)
    where_t = {"tag": "unionall", "var": t, "body": datatype("Main.VarName", sym, t)}
    where = {"tag": "unionall", "var": sym, "body": where_t}
    holder = struct(datatype("Main.Holder", where), 1)
    path = _write(tmp_path, "chain.bson", {"info": holder, "u": union})
    values = tx.load(path)
    assert values["u"] == tx.Singleton(
        tx.JuliaType.parse("Core.Type{Union{Core.Int64,Core.Nothing,Core.String}}")
    )
    assert str(values["info"].type) == "Main.Holder{Main.VarName{sym, T} where T where sym}"
    out = tmp_path / "chain.jld2"
    assert main(["convert", path, str(out)]) == 0  # (verified: read back equal)
    assert tx.values_equal(tx.load(out), values)


@pytest.mark.parametrize(
    ("head", "said"),
    [
        # ornellavolle/ImageClassification.jl model.bson (blob 721aacca): an MLJ machine, MLJ.save
        (b"7JL\x0c\x04\x00\x00\x005\x10\x01\x07Machine", "Julia Serialization stream"),
        # MatthewMcLeod/curiosity src/data/action_noise_0.01/OneDTMazeEvalSet_d_pi.jld2 (blob 75084c5f)
        (b"\r\nHDF5-based Julia Data Format, version 0.1.1\x00", "altered as text"),
        (b"version https://git-lfs.github.com/spec/v1\noid sha256:00\n", "Git LFS pointer"),
    ],
    ids=["serialization", "crlf-jld2", "lfs-pointer"],
)
def test_a_file_of_another_known_format_is_named(tmp_path: Path, head: bytes, said: str) -> None:
    path = tmp_path / "model.bson"
    path.write_bytes(head + bytes(600))
    with pytest.raises(WrongFormatError, match=said):
        tx.open(path)
    path.write_bytes(b"something else" + bytes(600))
    with pytest.raises(WrongFormatError) as err:
        tx.open(path)
    assert str(err.value).endswith("nor a BSON file (file offset 0)")


def test_a_file_whose_root_is_a_lowered_dict_has_that_dicts_keys_as_names(tmp_path: Path) -> None:
    """``BSON.bson(path, Dict("learner" => …))``: BSON.jl lowers a Dict that is not a
    ``Dict{Symbol}`` to a tagged document, and that document is the file's root (``BSON.load``
    returns the Dict). Real: MatthewMcLeod/curiosity src/data/MC_learned_policies/Goal.bson (blob
    a8e2aa2b, commit e6df2d12a2; a ``Dict{String,Any}`` of a Q-learner)."""
    from treexchange._bson._writer import encode

    weights = np.arange(6, dtype=np.float64).reshape(2, 3)
    lowered = struct(
        datatype("Base.Dict", datatype("Core.String"), datatype("Core.Any")),
        ["learner", "steps"],
        [array(None, weights), 5],
    )
    path = tmp_path / "policy.bson"
    path.write_bytes(encode(lowered))
    values = tx.load(path)
    assert list(values) == ["learner", "steps"] and values["steps"] == 5
    np.testing.assert_array_equal(values["learner"], weights)
    with tx.open(path) as f:
        assert list(f) == ["learner", "steps"] and f["learner"].shape == (2, 3)
    out = tmp_path / "policy.jld2"
    tx.save(out, **values)
    assert tx.values_equal(tx.load(out), values)
    path.write_bytes(
        encode(struct(datatype("Base.Dict", datatype("Core.Int64"), datatype("Core.Any")), [1], [2]))
    )
    with pytest.raises(tx.UnsupportedError, match="not named entries"):
        tx.load(path)


def test_a_cycle_through_a_struct_reads_as_that_struct(tmp_path: Path) -> None:
    """BSON.jl stores a struct reached again inside itself as a backref to itself, and its load
    builds it (the struct first, then its fields). Real: MatthewMcLeod/curiosity
    src/data/MC_learned_policies/Goal.bson (blob a8e2aa2b): a ``QLearner`` whose eligibility
    traces are an ``IdDict`` keyed by that learner."""
    q = np.arange(6, dtype=np.float64).reshape(2, 3)
    iddict = struct(datatype("Base.IdDict", datatype("Core.Any"), datatype("Core.Any")), [backref(1)], [0.5])
    learner = struct(datatype("Main.QLearner"), array(None, q), struct(datatype("Main.TB"), 0.9, iddict))
    path = tmp_path / "policy.bson"
    path.write_bytes(bson_file({"learner": backref(1), "steps": 3}, [learner]))
    value = tx.load(path, "learner")
    traces = value["2"]["2"]
    assert traces["keys"][0] is value and value.mutable  # the cycle, as one Python object
    np.testing.assert_array_equal(value["1"], q)
    out = tmp_path / "policy.jld2"
    tx.save(out, **tx.load(path))
    again = tx.load(out, "learner")
    assert again["2"]["2"]["keys"][0] is again and tx.values_equal(again, value)
    schema = tx.infer_schema(str(path))
    assert "ref" in schema.model_dump_json()
    # A list that contains itself reads as that list (tests/test_bson_read.py has the details)
    loop = tx.load(bson_file({"x": backref(1)}, [[backref(1)]]), "x")
    assert loop[0] is loop


def test_a_struct_of_ones_own_holding_layers_ports_with_the_chain_it_applies(tmp_path: Path) -> None:
    """A model defined as ``struct Model; dense; rnn; out; end`` (Flux.@functor): its forward pass
    is code; told it is a Chain of its layer fields in order, it ports. Real: red-g/Heat-Waves
    model1.bson (blob 92e2a1e7: ``Main.Model`` of Dense, Recur{RNNCell}, Dense)."""
    rng = np.random.default_rng(2)
    w1, b1 = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=4).astype(np.float32)
    w2, b2 = rng.normal(size=(2, 4)).astype(np.float32), rng.normal(size=2).astype(np.float32)

    def dense(w: np.ndarray, b: np.ndarray, f: str) -> dict[str, Any]:
        return struct(
            datatype("Flux.Dense", datatype(f)), array(None, w), array(None, b), struct(datatype(f))
        )

    own = struct(datatype("Main.Model"), dense(w1, b1, "NNlib.#relu"), 7, dense(w2, b2, "Base.#identity"))
    path = _write(tmp_path, "model.bson", {"model": own})
    with pytest.raises(
        ConversionError, match=r"Main.Model is a struct of your own .* \(fields 1, 3\).*architecture="
    ) as err:
        tx.from_flux(path, "model")
    # (each field's path is named, the way to port one layer alone: SpeedyWeatherEmulator's
    # TrainedModel(chain, zscore_para, sim_para) was told to pass a Chain, which its struct refuses)
    assert "name its path: ('model', '1') or ('model', '3')" in str(err.value)
    agent = struct(
        datatype("Main.Agent"), dense(w1, b1, "NNlib.#relu"), struct(datatype("Flux.Optimise.Adam"), 0.001)
    )
    with pytest.raises(ConversionError, match=r"\(fields 1\)"):  # (the optimiser holds no layers)
        tx.from_flux(_write(tmp_path, "agent.bson", {"agent": agent}), "agent")
    first = tx.from_flux(path, ("model", "1"))
    np.testing.assert_allclose(
        np.asarray(first(np.ones(3, np.float32))), np.maximum(w1.sum(1) + b1, 0), rtol=1e-5
    )
    model = tx.from_flux(path, "model", architecture="Chain(Dense(3 => 4, relu), Dense(4 => 2))")
    x = rng.normal(size=3).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(model(x)), w2 @ np.maximum(w1 @ x + b1, 0) + b2, rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ConversionError):  # a Chain of another length is not this struct's
        tx.from_flux(path, "model", architecture="Chain(Dense(3 => 4, relu))")


def test_a_struct_of_ones_own_names_the_layers_inside_its_vectors_and_structs(tmp_path: Path) -> None:
    """ArjunNarayanan/Julia-PG-EdgeFlip results/models/MCTS/3L.bson (blob 44f808cd): ``PVNet(emodels,
    policy, value, …)``, ``emodels`` a Vector of ``EdgeModel(Dense, BatchNorm)``. The refusal named
    only the fields holding a layer directly (2, 3): the three EdgeModels' layers, to be ported by
    hand too, went unsaid. It names every layer's path now, at any depth, the first few and a count;
    each path ports that layer alone."""
    rng = np.random.default_rng(5)

    def dense(n_in: int, n_out: int) -> dict[str, Any]:
        w, b = rng.normal(size=(n_out, n_in)).astype(np.float32), np.zeros(n_out, np.float32)
        relu = datatype("NNlib.#relu")
        return struct(datatype("Flux.Dense", relu), array(None, w), array(None, b), struct(relu))

    def edge(n_in: int) -> dict[str, Any]:
        return struct(datatype("Main.PolicyAndValueNetwork.EdgeModel"), dense(n_in, 4), dense(4, 4))

    chain = struct(datatype("Flux.Chain", datatype("Core.Tuple")), tuple_(dense(4, 2), dense(2, 1)))
    edges = [edge(3), edge(4), edge(4)]
    pvnet = struct(datatype("Main.PolicyAndValueNetwork.PVNet"), edges, chain, chain, 3)
    path = _write(tmp_path, "3L.bson", {"policy": pvnet})
    with pytest.raises(ConversionError) as err:
        tx.from_flux(path, "policy")
    said = str(err.value)
    # (the shallowest first, a whole Chain before a part of an EdgeModel; the rest counted)
    assert "(8 layers, at 2, 3, 1[1].1, 1[1].2, 1[2].1, 1[2].2 and 2 more)" in said
    assert "name its path: ('policy', '2') or ('policy', '3') or ('policy', '1', 1, '1')" in said
    assert "field order" not in said  # (no Chain of its fields computes what it does)
    x = np.ones(3, np.float32)
    first = tx.from_flux(path, ("policy", "1", 1, "1"))
    w = tx.load(path, "policy")["1"][0]["1"]["1"]
    np.testing.assert_allclose(np.asarray(first(x)), np.maximum(w @ x, 0), rtol=1e-6)
    # Inside a Dict, a Tuple and a struct of one's own too; a Dict of settings holds none
    settings = datatype("Base.Dict", datatype("Core.String"), datatype("Core.Any"))
    nested = struct(datatype("Main.Agent"), struct(settings, ["q", "ε"], [chain, 0.1]), tuple_(edge(3), 5))
    with pytest.raises(ConversionError, match=r"\(3 layers, at 1\.q, 2\[1\]\.1, 2\[1\]\.2\)"):
        tx.from_flux(_write(tmp_path, "agent.bson", {"agent": nested}), "agent")


def test_the_layers_inside_a_struct_of_ones_own_are_found_through_a_cycle() -> None:
    """A struct that holds itself (a training state and its parent) is refused as a cycle before
    the layers are looked for; the look for them stops at each object seen, so it ends anyway."""
    from treexchange._port._wholemodel import _held_layers

    dense = tx.JuliaStruct("Flux.Dense", {"weight": np.ones((2, 2)), "bias": np.zeros(2)})
    node = tx.JuliaStruct("Main.Node", {"layers": [dense], "parent": None})
    node.fields["parent"] = [node, (node, dense)]
    assert _held_layers(node) == [("layers", 1)]
    many = tx.JuliaStruct("Main.Many", {"all": [tx.JuliaStruct("Main.Edge", {"d": dense}) for _ in range(3)]})
    assert _held_layers(many) == [("all", 1, "d")]  # (one Dense, shared: at its first path)


def test_a_function_of_ones_own_in_a_chain_is_named_as_such(tmp_path: Path) -> None:
    """Real: harrychenfeng/CSC412-2506_Project encoder.bson (blob 5817afe0, a Pluto notebook's
    ``Chain(Dense, Dense, unpack_guassian_params)``, the function ``Main.workspace3.#…``)."""
    w, b = np.ones((2, 3), np.float32), np.zeros(2, np.float32)
    dense = struct(datatype("Flux.Dense", datatype("Base.#identity")), array(None, w), array(None, b),
                   struct(datatype("Base.#identity")))  # fmt: skip
    for fn, said in [
        ("Main.workspace3.#unpack_params", "one of your own"),
        ("Other.#mystery", "unknown function"),
    ]:
        chain = struct(datatype("Flux.Chain", datatype("Core.Tuple")), tuple_(dense, struct(datatype(fn))))
        path = _write(tmp_path, "encoder.bson", {"encoder": chain})
        with pytest.raises(ConversionError, match=said):
            tx.from_flux(path, "encoder")


def test_a_real_policy_saved_as_a_string_keyed_dict_with_a_cycle_reads_and_converts(tmp_path: Path) -> None:
    """MatthewMcLeod/curiosity src/data/MC_learned_policies/Goal.bson (MIT, bundled): written by
    ``BSON.bson(path, Dict("learner" => …, …))``, so its root is a lowered ``Dict{String,Any}``; the
    ``QLearner`` is a key of its own ``TB`` update's ``IdDict``."""
    path = BUNDLED_DIR / "bson" / "mcleod_curiosity_goal_policy.bson"
    values = tx.load(path)
    assert sorted(values) == ["exp", "fc", "info", "learner"]
    learner = values["learner"]
    assert learner.type.name == "Curiosity.QLearner" and learner["1"].shape == (3, 648)
    assert learner["2"]["5"]["keys"][0] is learner  # the cycle, one object
    assert learner["2"]["4"]["keys"][0] is learner["1"]  # the Q table, shared through a backref
    out = tmp_path / "goal.jld2"
    tx.save(out, **values)
    again = tx.load(out)
    assert tx.values_equal(again, values) and again["learner"]["2"]["5"]["keys"][0] is again["learner"]


def test_a_lowered_root_is_parsed_once_by_open_and_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening reads a lowered root whole for its names; the file's reads then take their values
    from that reading (the root was parsed and read again in a session of the file's own)."""
    from treexchange._bson._julia import Session

    roots: list[int] = []
    value = Session.value

    def counted(self: Session, raw: Any, path: Any, *args: Any, **kw: Any) -> Any:
        if not path:
            roots.append(1)
        return value(self, raw, path, *args, **kw)

    monkeypatch.setattr(Session, "value", counted)
    path = BUNDLED_DIR / "bson" / "mcleod_curiosity_goal_policy.bson"
    with tx.open(path) as f:
        learner = f["learner"].read()
        assert f.read()["learner"] is learner and learner["2"]["5"]["keys"][0] is learner
    assert len(roots) == 1
    assert sorted(tx.load(path)) == ["exp", "fc", "info", "learner"]
    assert len(roots) == 2


def _complex(re: int, im: int) -> tx.JuliaStruct:
    return tx.JuliaStruct("Complex{Int64}", {"re": np.int64(re), "im": np.int64(im)})


def _raw(eltype: Any, records: np.ndarray) -> dict[str, Any]:
    """An ``array`` document of bits-struct elements: BSON.jl stores their raw memory."""
    return {"tag": "array", "type": eltype, "size": list(records.shape), "data": records.tobytes(order="F")}


def test_an_array_of_bits_structs_reads_each_elements_fields(tmp_path: Path) -> None:
    """JuliaIO/BSON.jl test.bson (``a = [1+2im, 3+4im]``, blob f73bd43e): BSON.jl stores an array
    of any bits type as its raw memory, a ``Complex{Int64}`` as much as a ``Float32``. Each element
    was one 16-byte JuliaBits (``inspect`` showed 1+2im as 36893488147419103233, ``convert`` failed
    its read-back). The fields of a struct whose type says them are decoded, padding included; a
    struct of one's own stays its bytes."""
    i64, i32, i8, f64 = (datatype(f"Core.{n}") for n in ("Int64", "Int32", "Int8", "Float64"))
    complex_t = np.dtype([("re", "<i8"), ("im", "<i8")])
    z = np.array([[(1, 2), (3, 4), (5, 6)], [(7, 8), (9, 10), (11, 12)]], complex_t)
    padded_t = np.dtype([("1", "i1"), ("2", "<f8")], align=True)  # 7 bytes of padding after the Int8
    pairs = np.array([(-3, 0.5), (4, 1.5)], padded_t)
    named_t = np.dtype([("a", "<i4"), ("b", "?")], align=True)
    named = np.array([(7, True), (-1, False)], named_t)
    ratio = np.array([(1, 3), (-2, 5)], np.dtype([("num", "<i4"), ("den", "<i4")]))
    names = tuple_({"tag": "symbol", "name": "a"}, {"tag": "symbol", "name": "b"})
    path = _write(
        tmp_path,
        "bits.bson",
        {
            "z": _raw(datatype("Base.Complex", i64), z),
            "one": struct(datatype("Base.Complex", i64), 7, 8),
            "pairs": _raw(datatype("Core.Tuple", i8, f64), pairs),
            "named": _raw(
                datatype("Core.NamedTuple", names, datatype("Core.Tuple", i32, datatype("Core.Bool"))), named
            ),
            "ratio": _raw(datatype("Base.Rational", i32), ratio),
            "point": _raw(datatype("Main.Point"), ratio),
        },
    )
    values = tx.load(path)
    assert values["z"].shape == (2, 3)
    assert values["z"][1, 2] == _complex(11, 12)
    assert values["z"][0, 0] == _complex(1, 2)
    assert values["one"] == _complex(7, 8)
    assert list(values["pairs"]) == [(-3, 0.5), (4, 1.5)]
    assert [dict(x) for x in values["named"]] == [{"a": 7, "b": True}, {"a": -1, "b": False}]
    assert values["ratio"][1].fields == {"num": -2, "den": 5}
    assert all(isinstance(x, tx.JuliaBits) and len(x.data) == 8 for x in values["point"])
    target = tmp_path / "bits.jld2"
    tx.save(target, **values)
    assert tx.values_equal(tx.load(target), values)
    with h5py.File(target, "r") as f:  # the independent reader: compound re/im, dims reversed
        assert [tuple(x) for x in f["z"][()][1]] == [(3, 4), (9, 10)]  # Julia z[:, 2]


def test_a_broadcast_connection_ports(tmp_path: Path) -> None:
    """``SkipConnection(se_block, .*)`` (a squeeze-excitation gate) and ``Parallel(.+, ...)``: in
    Julia >= 1.6 ``.*`` is the value ``Base.Broadcast.BroadcastFunction(*)``, stored as that struct
    (its type parameter the function): "unknown connection function 'BroadcastFunction'". Real:
    char5742/TetrisAI mymodel_stable.jld2 (blob a21d486f, a whole Flux model of SE-ResNet blocks;
    BSON.jl stores the same struct). Given in an architecture, ``.+`` / ``.*`` (and ``min``) raised
    a bare ValueError at the first call; ``cat`` (which needs ``dims=``) is refused when the model
    is built, ``tuple`` gives both values."""
    rng = np.random.default_rng(5)
    w1, b1, w2, b2 = (rng.normal(size=s).astype(np.float32) for s in ((3, 3), (3,), (3, 3), (3,)))
    matrix, vector = (datatype("Core.Array", datatype("Core.Float32"), n) for n in (2, 1))

    def dense(w: np.ndarray, b: np.ndarray, f: str) -> dict[str, Any]:
        return struct(datatype("Flux.Dense", datatype(f), matrix, vector), array(None, w), array(None, b),
                      struct(datatype(f)))  # fmt: skip

    def broadcast(op: str) -> tuple[dict[str, Any], dict[str, Any]]:  # the struct and its type
        t = datatype("Base.Broadcast.BroadcastFunction", datatype(f"Base.#{op}"))
        return struct(t, struct(datatype(f"Base.#{op}"))), t

    times, times_t = broadcast("*")
    plus, plus_t = broadcast("+")
    skip = struct(
        datatype("Flux.SkipConnection", datatype("Flux.Dense"), times_t), dense(w1, b1, "NNlib.#σ"), times
    )
    par = struct(datatype("Flux.Parallel", plus_t, datatype("Core.Tuple")), plus,
                 tuple_(dense(w1, b1, "Base.#identity"), dense(w2, b2, "Base.#identity")))  # fmt: skip
    path = _write(tmp_path, "se.bson", {"skip": skip, "par": par, "ps": [array(None, w1), array(None, b1)]})
    x = rng.normal(size=3).astype(np.float32)
    gate = 1 / (1 + np.exp(-(w1 @ x + b1)))
    np.testing.assert_allclose(np.asarray(tx.from_flux(path, "skip")(x)), gate * x, rtol=1e-5)
    np.testing.assert_allclose(
        np.asarray(tx.from_flux(path, "par")(x)), (w1 @ x + b1) + (w2 @ x + b2), rtol=1e-5, atol=1e-6
    )
    for text, expected in [
        (".*", gate * x),
        ("Base.Broadcast.BroadcastFunction(*)", gate * x),
        ("min", np.minimum(gate, x)),
    ]:
        model = tx.from_flux(path, "ps", architecture=f"SkipConnection(Dense(3 => 3, σ), {text})")
        np.testing.assert_allclose(np.asarray(model(x)), expected, rtol=1e-5, err_msg=text)
    paired = tx.from_flux(path, "ps", architecture="SkipConnection(Dense(3 => 3, σ), tuple)")(x)
    assert isinstance(paired, tuple)  # (Flux: tuple(layer(x), x); a connection since 2026-11-28)
    np.testing.assert_allclose(np.asarray(paired[0]), gate, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(paired[1]), x)
    with pytest.raises(ConversionError, match="unknown connection function 'cat'"):
        tx.from_flux(path, "ps", architecture="SkipConnection(Dense(3 => 3, σ), cat)")


def test_a_bson_file_whose_zero_bytes_became_spaces_is_named(tmp_path: Path) -> None:
    """tristanth03/UROP "html ui/digits.bson" (blob 9ff9c0bb): the very bytes of the repository's
    digits.bson with every 0x00 turned into 0x20, as a text tool does; "nor a BSON file" said
    nothing of it. Its length field, read with the spaces as zeros, is the file's size."""
    good = bson_file({"model": struct(datatype("Main.M"), array(None, np.arange(40, dtype=np.float32)))})
    path = tmp_path / "digits.bson"
    path.write_bytes(good.replace(b"\x00", b" "))
    with pytest.raises(WrongFormatError, match=r"BSON file whose zero bytes were replaced by spaces"):
        tx.load(path)
    path.write_bytes(good.replace(b"\x00", b" ") + b" ")  # another length: no such claim
    with pytest.raises(WrongFormatError) as err:
        tx.load(path)
    assert "spaces" not in str(err.value)


def test_a_graph_network_chain_names_its_package_and_the_layers_that_do_not_port(tmp_path: Path) -> None:
    """``GNNChain(GCNConv(10 => 128, relu), GCNConv(128 => 128, relu), Dense(128 => 2))`` saved with
    BSON.jl: the refusal called GraphNeuralNetworks' container "a struct of your own holding Flux
    layers (1 layers, at 1[3])" and offered the Dense alone, silent on the two graph convolutions
    (95% of the weights). It now names the package and the layers that do not port. Real:
    raoulg/financeJulia gnnmodel.bson (blob a682c646)."""
    f32 = datatype("Core.Float32")
    relu = struct(datatype("NNlib.#relu"))

    def gcn(n_in: int, n_out: int) -> dict[str, Any]:
        w, b = np.ones((n_out, n_in), np.float32), np.zeros(n_out, np.float32)
        return struct(
            datatype("GraphNeuralNetworks.GCNConv", f32), array(None, w), array(None, b), relu, True, False
        )

    ident = struct(datatype("Base.#identity"))
    w, b = np.ones((2, 8), np.float32), np.zeros(2, np.float32)
    dense = struct(datatype("Flux.Dense", datatype("Base.#identity")), array(None, w), array(None, b), ident)
    chain = struct(datatype("GraphNeuralNetworks.GNNChain"), tuple_(gcn(3, 8), gcn(8, 8), dense))
    path = _write(tmp_path, "gnn.bson", {"model": chain})
    with pytest.raises(ConversionError) as err:
        tx.from_flux(path, "model")
    message = str(err.value)
    assert "GNNChain is a struct of GraphNeuralNetworks holding Flux layers (1 layer, at 1[3])" in message
    assert "not Flux's, which do not port (GraphNeuralNetworks.GCNConv at 1[1], 1[2])" in message
    assert "your own" not in message and "('model', '1', 3)" in message


def test_an_optimiser_saved_beside_the_model_is_named_and_kept_as_it_is(tmp_path: Path) -> None:
    """``BSON.@save "m.bson" rl_model adam iters``: the ``Flux.Optimise.ADAM`` (eta, beta, an IdDict
    of per-array moments) was "unknown layer type", and ``convert --flux-state`` wrote a "state"
    of its positional fields with a note to rename them and build "the model" in Julia. Real:
    Flourish38/stronghold-nav models/rl_rnn_1.bson (blob 003d5d53)."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    w = np.ones((2, 3), np.float32)
    moments = struct(
        datatype("Base.IdDict", datatype("Core.Any"), datatype("Core.Any")), [array(None, w)],
        [tuple_(array(None, w * 0), array(None, w * 0), tuple_(0.9, 0.999))],
    )  # fmt: skip
    adam = struct(datatype("Flux.Optimise.ADAM"), 0.001, tuple_(0.9, 0.999), moments)
    dense = struct(datatype("Flux.Dense", datatype("Base.#identity")), array(None, w),
                   array(None, np.zeros(2, np.float32)), struct(datatype("Base.#identity")))  # fmt: skip
    path = _write(tmp_path, "m.bson", {"model": dense, "adam": adam, "iters": 3111})
    with pytest.raises(ConversionError, match=r"Flux.Optimise.ADAM is an optimiser .*not a model"):
        tx.from_flux(path, "adam")
    printed = io.StringIO()
    roots = migrate_flux_state(path, tmp_path / "state.jld2", out=printed)
    assert "adam: written as it is (an optimiser" in printed.getvalue()
    assert "rename" not in printed.getvalue()
    assert tx.values_equal(roots["adam"], tx.load(path, "adam"))
    assert list(roots["model"]) == ["weight", "bias", "σ"]


def test_an_optimiser_saved_from_the_gpu_is_refused_as_an_optimiser(tmp_path: Path) -> None:
    """``BSON.@save "rq.bson" model hparams opt tf_dict`` with the model trained on the GPU: the
    ``Flux.Optimise.Adam``'s IdDict keys are ``CUDA.CuArray`` structs. ``from_flux(path, "opt")``
    said "the file holds no weights (GPU pointers) ... save the model from the CPU" at
    ``opt['4'].keys[1]`` (the walk met the device pointers before the optimiser was named). Real:
    chrhck/NeutrinoTelescopes assets/rq_spline_model.bson (blob 2418d355)."""
    f32 = datatype("Core.Float32")
    buffer = struct(datatype("CUDA.Mem.DeviceBuffer"), 0, 73728, True)
    cuarray = struct(datatype("CUDA.CuArray", f32, 2, datatype("CUDA.Mem.DeviceBuffer")), buffer, 73728, 0,
                     tuple_(768, 24))  # fmt: skip
    iddict = datatype("Base.IdDict", datatype("Core.Any"), datatype("Core.Any"))
    moments = struct(iddict, [cuarray], [tuple_()])
    adam = struct(datatype("Flux.Optimise.Adam"), 0.001, tuple_(0.9, 0.999), 1e-8, moments)
    path = _write(tmp_path, "rq.bson", {"opt": adam})
    with pytest.raises(ConversionError, match=r"Adam is an optimiser .*not a model.* \(at opt\)$"):
        tx.from_flux(path, "opt")


def test_a_list_of_arrays_without_architecture_is_not_called_a_parameter_list(tmp_path: Path) -> None:
    """JamesCobley/Oxi_Shapes ricci_learned_brain_batch_20250502_120445 (1).bson (blob c56c686b):
    ``phi_history``, a Vector of Float32 vectors beside a struct of one's own, made ``convert
    --flux-state`` say it was "a parameter list (the arrays of Flux.params)". A plain Vector of
    arrays may be either; a saved ``Params`` is one."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    history = [array(None, np.arange(4, dtype=np.float32)), array(None, np.ones(4, np.float32))]
    path = _write(tmp_path, "brain.bson", {"phi_history": history})
    with pytest.raises(
        ConversionError, match=r"a list of arrays \(data, or a parameter list\).*--architecture"
    ):
        migrate_flux_state(path, tmp_path / "out.jld2", out=io.StringIO())
    with pytest.raises(ConversionError, match=r"'phi_history' is a list of arrays \(a parameter list"):
        tx.from_flux(path, "phi_history")  # said "a Flux.state has no layer types"
    params = _zygote_params([np.ones(4, np.float32)], buffer=True)
    path = _write(tmp_path, "params.bson", {"ps": params})
    with pytest.raises(ConversionError, match=r"^a parameter list \(the arrays of Flux.params\)"):
        migrate_flux_state(path, tmp_path / "out.jld2", out=io.StringIO())


def _cuarray(shape: tuple[int, ...]) -> dict[str, Any]:
    """A ``CUDA.CuArray{Float32}`` as BSON.jl saves one: its storage's device address and dims."""
    storage = struct(datatype("CUDA.ArrayStorage", datatype("CUDA.Mem.DeviceBuffer")), 0x7F00, 1)
    kind = datatype("CUDA.CuArray", datatype("Core.Float32"), len(shape), datatype("CUDA.Mem.DeviceBuffer"))
    return struct(kind, storage, int(np.prod(shape)), 0, tuple_(*shape))


@pytest.mark.parametrize("saved", ["params", "vector"])
def test_a_parameter_list_saved_from_the_gpu_is_refused_by_flux_state(tmp_path: Path, saved: str) -> None:
    """guilhermealvesc/cnn-vgg19-cifar10 cifar10_conv_vgg19_85acc_25epc_v1.bson (blob 01106bac):
    ``params=ps`` of ``CuArray``s (device addresses, no numbers). ``from_flux`` refused it ("GPU
    pointers"); ``convert --flux-state``, with or without ``--architecture``, wrote it "as it is (no
    Flux layers in it)" and exited 0, where the same list from the CPU is refused."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    gpu = [_cuarray((3, 3, 3, 64)), _cuarray((64,))]
    value = _zygote_params(gpu, buffer=True) if saved == "params" else gpu
    path = _write(tmp_path, "gpu.bson", {"params": value, "acu": 0.85})
    where = r"params\['1'\]\['1'\]\[1\]" if saved == "params" else r"params\[1\]"
    for architecture in (None, "Chain(Conv((3, 3), 3 => 64))"):
        with pytest.raises(ConversionError, match=rf"holds no weights \(GPU pointers\).* \(at {where}\)$"):
            migrate_flux_state(path, tmp_path / "out.jld2", architecture=architecture, out=io.StringIO())
    assert not (tmp_path / "out.jld2").exists()
    with pytest.raises(ConversionError, match=r"holds no weights \(GPU pointers\)"):
        tx.from_flux(path, "params", architecture="Chain(Conv((3, 3), 3 => 64))")


def test_a_checkpoint_dict_of_models_gets_a_dict_of_states(tmp_path: Path) -> None:
    """ArjunNarayanan/Quadrl output/best_model.bson (blob dab25c97):
    ``BSON.@save "best_model.bson" d`` with ``d = Dict("policy" => Policy(Chain(...)), "evaluator" =>
    ...)``. ``convert --flux-state`` said "d: written as it is (no Flux layers in it)" (the search
    for Flux layers passed Dicts by), and a Dict inside a model became ``()``. ``Flux.state`` keeps
    a Dict as a container: the Dict of its values' states (there, GPU pointers: refused as such)."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    w, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(2, np.float32)
    dense = struct(datatype("Flux.Dense", datatype("NNlib.#relu")), array(None, w), array(None, b),
                   struct(datatype("NNlib.#relu")))  # fmt: skip
    chain = struct(datatype("Flux.Chain", datatype("Core.Tuple")), tuple_(dense))
    policy = struct(datatype("Main.SimplePolicy.Policy"), chain, 0.5)
    kind = datatype("Base.Dict", datatype("Core.String"), datatype("Core.Any"))
    path = _write(
        tmp_path, "best.bson", {"d": struct(kind, ["policy", "model", "epoch"], [policy, chain, 3])}
    )
    printed = io.StringIO()
    roots = migrate_flux_state(path, tmp_path / "state.jld2", out=printed)
    assert "no Flux layers" not in printed.getvalue()
    assert "a Dict of states where the file has models ('policy', 'model')" in printed.getvalue()
    written = tx.load(tmp_path / "state.jld2", "d")
    assert isinstance(written, tx.JuliaDict) and tx.values_equal(written, roots["d"])
    assert written["epoch"] == 3 and list(written["model"]) == ["layers"]
    assert list(written["policy"]["1"]) == ["layers"] and written["policy"]["2"] == 0.5
    x = np.array([1, -2, 3], np.float32)
    for where in [("d", "model"), ("d", "policy", "1")]:
        model = tx.from_flux(tmp_path / "state.jld2", where, architecture="Chain(Dense(3 => 2, relu))")
        np.testing.assert_allclose(np.asarray(model(x)), np.maximum(w @ x + b, 0))
    gpu_dense = struct(datatype("Flux.Dense", datatype("NNlib.#relu")), _cuarray((2, 3)), _cuarray((2,)),
                       struct(datatype("NNlib.#relu")))  # fmt: skip
    gpu_chain = struct(datatype("Flux.Chain", datatype("Core.Tuple")), tuple_(gpu_dense))
    on_gpu = struct(kind, ["policy"], [struct(datatype("Main.SimplePolicy.Policy"), gpu_chain, 0.5)])
    path = _write(tmp_path, "gpu.bson", {"d": on_gpu})
    with pytest.raises(ConversionError, match=r"GPU pointers.*\(at d\.policy\['1'\]\.layers\[1\]\.weight\)"):
        migrate_flux_state(path, tmp_path / "gpu.jld2", out=io.StringIO())


def test_models_nested_in_an_entry_are_pointed_to(tmp_path: Path) -> None:
    """SvenDuve/RLProject output/Acrobot/DQN_Acrobot.bson (blob 7a11f324): the entry is a Vector of
    ``RLTypes.AgentParameter`` structs, each holding its Q-networks (Flux Chains) in a Vector;
    from_flux said the entry "holds no Flux structs (a Flux.state has no layer types)". It now
    names where the models are, and the path it gives as the name ports that one."""
    w, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(2, np.float32)
    dense = struct(datatype("Flux.Dense", datatype("NNlib.#relu")), array(None, w), array(None, b),
                   struct(datatype("NNlib.#relu")))  # fmt: skip
    chain = struct(datatype("Flux.Chain", datatype("Core.Tuple")), tuple_(dense))
    agent = struct(datatype("RLTypes.AgentParameter"), 0.99, [chain, chain])
    path = _write(tmp_path, "dqn.bson", {"DQN": [agent], "history": [1.0, 2.0]})
    with pytest.raises(
        ConversionError,
        match=r"'DQN' is no model but holds Flux models, at DQN\[1\]\['2'\]\[1\], .*: pass the path of "
        r"the one you want as the name, tx.from_flux\(path, \('DQN', 1, '2', 1\)\)",
    ):
        tx.from_flux(path, "DQN")
    with pytest.raises(ConversionError, match="holds no Flux structs"):  # nothing inside: as before
        tx.from_flux(path, "history")
    x = np.array([1, -2, 3], np.float32)
    for where in [("DQN", 1, "2", 1), ["DQN", 1, "2", 2]]:  # the path the message gives: ports
        np.testing.assert_allclose(np.asarray(tx.from_flux(path, where)(x)), np.maximum(w @ x + b, 0))


def test_a_path_into_an_entry_that_leads_nowhere_says_what_is_there(tmp_path: Path) -> None:
    """``from_flux(path, ("entry", ...))``: each step of the path is checked, and a wrong one names
    what the value there holds (fields, keys, or how many elements, counted from 1)."""
    w, b = np.ones((2, 3), np.float32), np.zeros(2, np.float32)
    dense = struct(datatype("Flux.Dense", datatype("NNlib.#relu")), array(None, w), array(None, b),
                   struct(datatype("NNlib.#relu")))  # fmt: skip
    chain = struct(datatype("Flux.Chain", datatype("Core.Tuple")), tuple_(dense))
    agent = struct(datatype("RLTypes.AgentParameter"), 0.99, [chain])
    path = _write(tmp_path, "dqn.bson", {"DQN": [agent]})
    with pytest.raises(ConversionError, match=r"DQN has no 0: it holds 1 element \(positions count from 1\)"):
        tx.from_flux(path, ("DQN", 0))
    with pytest.raises(ConversionError, match=r"DQN\[1\] has no 'q': it holds fields \['1', '2'\]") as err:
        tx.from_flux(path, ("DQN", 1, "q"))
    assert err.value.path == ("DQN", 1)
    with pytest.raises(ConversionError, match=r"DQN\[1\]\['1'\] has no 'x': it holds no entries \(a float"):
        tx.from_flux(path, ("DQN", 1, "1", "x"))
    with pytest.raises(TypeError, match="beginning with one"):
        tx.from_flux(path, (1, "DQN"))
    assert tx.from_flux(path, ("DQN", 1, "2", 1)) is not None


def test_the_real_complex_array_of_bsonjl_reads_and_converts(tmp_path: Path) -> None:
    """JuliaIO/BSON.jl test/test.bson (MIT, bundled): ``Dict(:a => [1+2im, 3+4im], :b => "Hello,
    World!")`` as BSON.jl's own tests write it; ``a`` is a ``Complex{Int64}`` array of raw bytes."""
    path = BUNDLED_DIR / "bson" / "bsonjl_test_complex.bson"
    values = tx.load(path)
    assert [(int(z.fields["re"]), int(z.fields["im"])) for z in values["a"]] == [(1, 2), (3, 4)]
    assert values["b"] == "Hello, World!"
    out = tmp_path / "test.jld2"
    tx.save(out, **values)
    assert tx.values_equal(tx.load(out), values)
    with h5py.File(out, "r") as f:
        assert [tuple(int(x) for x in z) for z in f["a"][()]] == [(1, 2), (3, 4)]


def test_a_whole_lenet_of_flux_0_13_reaches_the_accuracy_its_notebook_printed() -> None:
    """AndreyGermanov/phones_reader digits.bson (MIT, bundled; a LeNet-5 of Flux ≥ 0.13 saved
    whole with ``BSON.@save "digits.bson" model``, ``Dense(84 => 10, sigmoid)`` then ``softmax``):
    ported with no architecture, it scores on the MNIST test set the 0.9846 its notebook
    (``digits.ipynb``) printed after the last epoch, on images loaded from PNG (rows first, as
    ``Flux.Data.MNIST`` gave them)."""
    images, labels = flux_data_mnist()
    model = jax.jit(
        jax.vmap(tx.from_flux(BUNDLED_DIR / "bson" / "germanov_phones_reader_digits.bson", "model"))
    )
    predicted = np.concatenate(
        [np.asarray(model(images[i : i + 2500])).argmax(1) for i in range(0, 10000, 2500)]
    )
    assert float(np.mean(predicted == labels)) == pytest.approx(0.9846, abs=1e-12)


def test_a_list_of_arrays_beside_a_whole_model_is_written_as_data(tmp_path: Path) -> None:
    """mcreel/SNM ARMA/neuralmodel.bson (blob dfa7b29d; 89 files of mcreel/SNM,
    mcreel/SimulatedNeuralMoments.jl, mcreel/Sandbox, mcreel/Econometrics): ``BSON.@save
    "neuralmodel.bson" nnmodel nninfo``, a Flux Chain and ``nninfo``, a Tuple of Float64 vectors (the
    statistics' means, spreads, ... used to transform the model's input). ``convert --flux-state``
    refused the whole file ("a list of arrays ... pass --architecture"), and with an architecture it
    would have read ``nninfo`` as the Chain's parameters. Beside a whole model, a list of arrays is
    data saved with it: written as it is, the model's state beside it. Alone it is still refused,
    and ``--architecture`` still reads it as a parameter list."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    w, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.ones(2, np.float32)
    dense = struct(datatype("Flux.Dense", datatype("NNlib.#tanh")), array(None, w), array(None, b),
                   struct(datatype("NNlib.#tanh")))  # fmt: skip
    chain = struct(datatype("Flux.Chain", datatype("Core.Tuple")), tuple_(dense))
    info = tuple_(array(None, np.arange(3.0)), array(None, np.ones(3)))
    path = _write(tmp_path, "neuralmodel.bson", {"nnmodel": chain, "nninfo": info})
    printed = io.StringIO()
    roots = migrate_flux_state(path, tmp_path / "state.jld2", out=printed)
    assert "nninfo: written as it is (a list of arrays beside the model in nnmodel" in printed.getvalue()
    assert tx.values_equal(roots["nninfo"], tx.load(path, "nninfo"))
    np.testing.assert_array_equal(tx.load(tmp_path / "state.jld2", "nnmodel")["layers"][0]["weight"], w)
    params = [array(None, w), array(None, b)]  # the same beside the model, as a Vector, with --architecture
    path = _write(tmp_path, "both.bson", {"nnmodel": chain, "ps": params})
    roots = migrate_flux_state(
        path, tmp_path / "both.jld2", architecture="Chain(Dense(3 => 2, tanh))", out=io.StringIO()
    )
    np.testing.assert_array_equal(roots["ps"]["layers"][0]["weight"], w)
    adam = struct(datatype("Flux.Optimise.ADAM"), 0.001, tuple_(0.9, 0.999), [])
    path = _write(tmp_path, "p.bson", {"params": params, "opt": adam})  # an optimiser is no model
    with pytest.raises(ConversionError, match=r"a list of arrays \(data, or a parameter list\)"):
        migrate_flux_state(path, tmp_path / "p.jld2", out=io.StringIO())
    path = _write(tmp_path, "info.bson", {"nninfo": info})  # alone: data or a parameter list
    with pytest.raises(ConversionError, match=r"a list of arrays \(data, or a parameter list\)"):
        migrate_flux_state(path, tmp_path / "info.jld2", out=io.StringIO())


@pytest.mark.parametrize(
    ("content", "said"),
    [
        # paulxshen/Luminescent.jl _temp/sol.bson (blob c3d16e3c): JSON under a BSON file's name
        (
            b'{"sparams":{"1.3":{"o1@0,o2@0":{"re":0.99,"im":-0.25}}}}\n',
            r"""text, not a binary file \(it begins '{"sparams":""",
        ),
        # mcreel/NeuralNetsForIndirectInference.jl CTSV/CTSV.jld (blob 93c748c7): a symbolic link,
        # which git stores as the path it points to
        (
            b"/home/michael/Desktop/Papers/NN/Code/CTSV.jld",
            r"text, not a binary file \(it begins '/home/michael/Desktop/Papers/NN/Code/CTS\.\.\.'\)",
        ),
        # yardw/HierarchicalSearches.jl data.jld2 (blob 706b9012): 262144 zero bytes
        (bytes(4096), r"begins with zero bytes only \(no header\)"),
    ],
    ids=["json", "symlink", "zeros"],
)
def test_a_text_or_zero_file_under_a_model_files_name_is_named(
    tmp_path: Path, content: bytes, said: str
) -> None:
    path = tmp_path / "model.bson"
    path.write_bytes(content)
    with pytest.raises(WrongFormatError, match=said):
        tx.open(path)
    path.write_bytes("données: é".encode()[:-1] + b"\xff\x00")  # binary after all: not called text
    with pytest.raises(WrongFormatError) as err:
        tx.open(path)
    assert str(err.value).endswith("nor a BSON file (file offset 0)")


def test_a_jld_v1_file_is_named_once_in_the_error(tmp_path: Path) -> None:
    """zouhx11/DSGE.jl test/reference/forecast_out.jld (blob 05cee3ad; 73 JLD v1 files of 9
    repositories): the error of ``load`` and of the commands said the path twice, once before and
    once quoted in the message ("x.jld: 'x.jld' is a JLD (v1) file")."""
    path = tmp_path / "forecast_out.jld"
    with h5py.File(path, "w", userblock_size=512) as f:
        f["x"] = np.arange(3.0)
    with open(path, "r+b") as f:
        f.write(b"Julia data file (HDF5), version 0.1.1\x00")
    with pytest.raises(WrongFormatError) as err:
        tx.load(path)
    assert str(err.value).count(str(path)) == 1
    assert "is a JLD (v1) file, not JLD2" in str(err.value)


def test_the_state_of_a_struct_of_ones_own_around_a_chain_names_its_fields(tmp_path: Path) -> None:
    """msainsburydale/NeuralIncompleteData workshop/NBE.bson (blob e0438759): ``model_state =
    Flux.state(θ̂)`` of a NeuralEstimators ``PointEstimator`` (a struct of one's own whose field
    ``network`` is the Chain), saved with BSON: ``(network = (layers = (...),),)``. With the Chain as
    ``architecture=`` the error said only "Chain expects a `layers` entry"; it now names the
    entries the state holds and the path to give as the name, which ports it."""
    rng = np.random.default_rng(3)
    w, b = rng.normal(size=(2, 3)).astype(np.float32), rng.normal(size=2).astype(np.float32)
    inner = tx.NamedTuple(layers=(tx.NamedTuple(weight=w, bias=b, σ=()),))
    path = tmp_path / "NBE.jld2"
    tx.save(path, model_state=tx.NamedTuple(network=inner))
    arch = "Chain(Dense(3 => 2, relu))"
    with pytest.raises(
        ConversionError,
        match=r"the state holds \['network'\] \('network' holds a state with `layers`: the state of a struct"
        r".* pass its path as the name, \('model_state', 'network'\)\)",
    ):
        tx.from_flux(path, "model_state", architecture=arch)
    tx.save(path, model_state=tx.NamedTuple(weight=w, bias=b, σ=()))  # a Dense's state: no hint
    with pytest.raises(
        ConversionError, match=r"the state holds \['weight', 'bias', 'σ'\] \(at model_state\)$"
    ):
        tx.from_flux(path, "model_state", architecture=arch)
    tx.save(path, model_state=tx.NamedTuple(network=inner))
    x = rng.normal(size=3).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(tx.from_flux(path, ("model_state", "network"), architecture=arch)(x)),
        np.maximum(w @ x + b, 0),
        rtol=1e-5,
    )


def test_the_bundled_snm_neural_model_and_its_statistics_migrate_together(tmp_path: Path) -> None:
    """The real file of the rule above: mcreel/SNM ARMA/neuralmodel.bson (commit 6376007e33, MIT),
    ``nnmodel`` (a Chain of three Dense, tanh) and ``nninfo`` (a Tuple of four Float64 vectors).
    ``--flux-state`` writes the Chain's state and ``nninfo`` as it is; the Chain ports, and computes
    what its stored arrays compute."""
    from treexchange._interop._fluxmigrate import migrate_flux_state

    path = BUNDLED_DIR / "bson" / "mcreel_snm_arma_neuralmodel.bson"
    printed = io.StringIO()
    roots = migrate_flux_state(path, tmp_path / "state.jld2", out=printed)
    assert "nninfo: written as it is (a list of arrays beside the model in nnmodel" in printed.getvalue()
    nninfo = tx.load(path, "nninfo")
    assert isinstance(nninfo, tuple) and all(a.dtype == np.float64 for a in nninfo)
    assert tx.values_equal(roots["nninfo"], nninfo)
    written = tx.load(tmp_path / "state.jld2")
    dense = [layer.fields for layer in tx.load(path, "nnmodel")["1"]]
    for layer, fields in zip(written["nnmodel"]["layers"], dense, strict=True):
        np.testing.assert_array_equal(layer["weight"], fields["1"])
    model = tx.from_flux(path, "nnmodel")
    x = np.random.default_rng(4).normal(size=dense[0]["1"].shape[1]).astype(np.float32)
    h = x
    for i, fields in enumerate(dense):
        h = fields["1"] @ h + fields["2"]
        h = np.tanh(h) if i < len(dense) - 1 else h
    np.testing.assert_allclose(np.asarray(model(x)), h, rtol=1e-5, atol=1e-5)
