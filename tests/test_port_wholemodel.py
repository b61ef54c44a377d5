"""Whole-model Flux files -> (Layer tree, Flux.state): real files, checked with the numpy reference."""

from __future__ import annotations

import _flux_reference as ref
import numpy as np
import pytest
from _mnist import julia_batch, mnist_test_set
from conftest import require_fixture

import treexchange as tx
from treexchange import ConversionError, JuliaStruct, NamedTuple, Singleton
from treexchange._port._arch import parse_architecture
from treexchange._port._spec import Layer
from treexchange._port._wholemodel import from_whole_model

VQVAE = "flux-model/vqvae_autoencoder7x7x16.jld2"
BN_FIELDS = ["λ", "β", "γ", "μ", "σ²", "ϵ", "momentum", "affine", "track_stats", "active", "chs"]
CONV_FIELDS = ["σ", "weight", "bias", "stride", "pad", "dilation", "groups"]


def _load(relpath: str, name: str) -> object:
    return tx.load(require_fixture(relpath), name)


def test_vqvae_tree_and_state() -> None:
    layer, state = from_whole_model(_load(VQVAE, "autoencoder"))
    assert layer.kinds() == [
        "Chain",
        "Chain", "Conv", "BatchNorm", "function", "Conv", "BatchNorm", "function", "Conv",
        "Chain", "ConvTranspose", "BatchNorm", "function", "ConvTranspose", "BatchNorm", "function",
        "ConvTranspose", "function",
    ]  # fmt: skip
    enc, dec = layer.children
    assert enc.children[0].args == {
        "kernel": (4, 4), "in": 1, "out": 16, "σ": "identity", "stride": (2, 2), "pad": (1, 1, 1, 1),
        "dilation": (1, 1), "groups": 1, "bias": True,
    }  # fmt: skip
    assert enc.children[1].args["ϵ"] == 1e-5 and enc.children[1].args["momentum"] == 0.1
    assert dec.children[0].args["in"] == 16 and dec.children[0].args["out"] == 32  # weight (k, out, in)
    assert dec.children[-1].args == {"name": "sigmoid"}
    # The ghost fields σ/λ (absent from the file) are back, in Flux's order, as Flux.state has them.
    enc_state = state["layers"][0]["layers"]
    assert list(enc_state[0]) == CONV_FIELDS and enc_state[0]["σ"] == ()
    assert list(enc_state[1]) == BN_FIELDS and enc_state[1]["λ"] == () and enc_state[1]["active"] is None
    assert enc_state[2] == ()
    assert state["layers"][1]["layers"][0]["weight"].shape == (3, 3, 32, 16)


def test_vqvae_reconstructs_digits_with_the_reference() -> None:
    """The author's scaling (pixels in [0, 1/255], spec §0.3); the output approximates the input."""
    images, _ = mnist_test_set()
    layer, state = from_whole_model(_load(VQVAE, "autoencoder"))
    x = julia_batch(images[:64]) / 255
    y = ref.forward(layer, state, x)
    assert y.shape == x.shape
    rel = float(np.mean((y - x) ** 2) / np.mean(x**2))
    assert rel <= 0.08


def test_hwdr_mlp_classifies_mnist_with_the_reference() -> None:
    images, labels = mnist_test_set()
    layer, state = from_whole_model(_load("flux-model/hwdr_mlp.jld2", "mlp"))
    assert layer.kinds() == ["Chain", "Dense", "Dense", "Dense", "function"]
    assert [c.args.get("σ") for c in layer.children[:3]] == ["relu", "relu", "identity"]
    probs = ref.forward(layer, state, ref.flatten(julia_batch(images)))
    np.testing.assert_allclose(probs.sum(axis=0), 1.0, rtol=1e-6)  # the trailing softmax ran
    assert float(np.mean(probs.argmax(axis=0) == labels)) >= 0.86


def test_old_flux_files() -> None:
    """Flux 0.11 Dense (fields W, b: renamed as current Flux names them, so the state ports and
    loads into a current Flux), a bare Dense, and a Tracker-era (Flux ≤ 0.9) Dense."""
    layer, state = from_whole_model(_load("flux-model/kitml_example_model.jld2", "nn"))
    assert [c.args["σ"] for c in layer.children] == ["relu", "relu", "relu", "identity"]
    assert list(state["layers"][0]) == ["weight", "bias", "σ"]
    x = np.random.default_rng(0).normal(size=(4, 3))
    w, b = state["layers"][0]["weight"], state["layers"][0]["bias"]
    np.testing.assert_allclose(
        ref.forward(layer.children[0], state["layers"][0], x), np.maximum(w @ x + b[:, None], 0)
    )
    dense, dstate = from_whole_model(_load("flux-model/solaris_test_model.jld2", "nn"))
    assert dense == Layer("Dense", {"in": 2, "out": 1, "σ": "tanh", "bias": True})
    assert list(dstate) == ["weight", "bias", "σ"]
    tracked, tstate = from_whole_model(_load("flux-model-zoo/temp.jld2", "temp"))
    assert tracked.args == {"in": 784, "out": 32, "σ": "relu", "bias": True}
    assert isinstance(tstate["weight"], np.ndarray) and tstate["weight"].shape == (32, 784)


def test_lenet_state_with_the_architecture_text_and_the_reference() -> None:
    """The LeNet Flux.state + its text, run by the reference: the first 500 test digits."""
    images, labels = mnist_test_set()
    arch = parse_architecture(
        "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)), "
        "Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
    )
    state = _load("flux-state/silver-bullet_lenet.jld2", "lenet_state")
    logits = ref.forward(arch, state, julia_batch(images[:500]))
    assert float(np.mean(logits.argmax(axis=0) == labels[:500])) >= 0.96


def _struct(type_: str, **fields: object) -> JuliaStruct:
    return JuliaStruct(type_, fields)


def _dense(out: int, cin: int, act: str = "NNlib.#relu") -> JuliaStruct:
    rng = np.random.default_rng(out * 100 + cin)
    return _struct(
        f"Flux.Dense{{{act},Core.Array{{Core.Float32,2}},Core.Array{{Core.Float32,1}}}}",
        weight=rng.normal(size=(out, cin)).astype(np.float32),
        bias=rng.normal(size=out).astype(np.float32),
    )


def test_containers_named_chains_and_ghost_connections() -> None:
    vcat_parallel = _struct(
        "Flux.Parallel{Base.#vcat,Core.Tuple{Flux.Dense,Flux.Dense}}", layers=(_dense(3, 2), _dense(4, 2))
    )
    skip = _struct("Flux.SkipConnection{Flux.Dense,Base.#+}", layers=_dense(2, 2))
    named = _struct("Flux.Chain{Core.NamedTuple}", layers=NamedTuple(par=vcat_parallel, skip_=_struct(
        "Flux.Chain{Core.Tuple}", layers=(Singleton("NNlib.#tanh"), skip))))  # fmt: skip
    layer, state = from_whole_model(named)
    assert layer.names == ("par", "skip_")
    assert layer.children[0].args == {"connection": "vcat"} and list(state["layers"]["par"]) == [
        "connection",
        "layers",
    ]
    assert layer.children[1].children[1].args == {"connection": "+"}
    assert list(state["layers"]["skip_"]["layers"][1]) == ["layers", "connection"]
    x = np.random.default_rng(1).normal(size=(2, 5))
    y = ref.forward(layer.children[0], state["layers"]["par"], x)
    assert y.shape == (7, 5)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (Singleton("Main.#109#110"), "anonymous function Main.#109#110"),
        (_dense(2, 2, "Main.#12#13"), "anonymous function Main.#12#13 as activation"),
        (_dense(2, 2, "Main.myact"), r"activation 'myact' is one of your own \(Main.myact\)"),
        (_struct("Main.MyLayer", w=np.zeros(2)), "unknown layer type Main.MyLayer; the Flux layers that"),
        # (settings saved beside a model, FishAres/RNP3's hyperparameters: no list of Flux layers)
        (
            _struct("Main.Hyper", lr=0.01, name="run3", sizes=(3, 4)),
            r"unknown layer type Main\.Hyper: a struct of Main holding no array \(settings, not weights\)",
        ),
        # (a user's struct named like a Flux layer: phuonglh/jvl's Main.Embedding holds W, not weight)
        (_struct("Main.Embedding", W=np.zeros((4, 9))), "Main.Embedding is not Flux's Embedding"),
        (_struct("Lux.Dense", in_dims=2, out_dims=3), "Lux.Dense is not Flux's Dense"),
        # (ge27zib/LVModels' NDE keeps Flux.destructure's θ: the message says where, and the way)
        (
            _struct("Main.NDE", p=_struct("Main.Params", θ=np.zeros(10, np.float32))),
            r"vector of 10 numbers at model\.p\.θ.*tx\.from_flux\(path, \('model', 'p', 'θ'\), architecture=",
        ),
        (_struct("Flux.Chain{Core.Tuple}", layers=(_dense(2, 2), 3)), "expected a Flux layer, found int"),
        (_struct("Flux.Parallel{Main.#3#4,Core.Tuple}", layers=(_dense(2, 2),)), "anonymous function"),
        # (a bare Flux ≥ 0.15 cell ports, tests/test_port_cells.py; a Flux ≤ 0.14 one, called
        # cell(h, x) and holding its state0, is in no file outside its Recur: refused, saying why)
        (
            _struct(
                "Flux.GRUCell{A,B,C}",
                Wi=np.zeros((6, 3)),
                Wh=np.zeros((6, 2)),
                b=np.zeros(6),
                state0=np.zeros((2, 1)),
            ),
            r"Flux.GRUCell outside Recur is a Flux ≤ 0.14 cell .* Recur\(GRUCell\(in => out\)\)",
        ),
    ],
)
def test_errors_name_the_culprit(value: object, message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        from_whole_model(value, path=("model",))


def _conv(weight_shape: tuple[int, ...], **fields: object) -> JuliaStruct:
    n = max(len(weight_shape) - 2, 1)
    given: dict[str, object] = {"stride": (1,) * n, "pad": (0,) * (2 * n), "dilation": (1,) * n, "groups": 1}
    given.update(fields)
    arrays = f"Core.Array{{Core.Float32,{len(weight_shape)}}},Core.Array{{Core.Float32,1}}"
    type_ = f"Flux.Conv{{{n},{2 * n},NNlib.#relu,{arrays}}}"
    return _struct(type_, weight=np.zeros(weight_shape, np.float32), bias=np.zeros(4, np.float32), **given)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        # a damaged file (the port fuzz: a reference moved to a sibling array) gave a Conv whose
        # weight is a vector; equinox's Conv failed with a ValueError of its own
        (_conv((4,), stride=(2, 2)), "Conv's weight has 1 dimensions; a convolution's has at least 3"),
        (_conv((3, 3, 1, 4), stride=(2,)), r"Conv's stride \(2,\) does not fit its 2 spatial dimensions"),
        (_conv((3, 3, 1, 4), dilation=(0, 1)), r"Conv's dilation \(0, 1\) does not fit"),
        (_conv((3, 3, 1, 4), groups=0), "Conv's groups is 0; Flux's is at least 1"),  # (equinox: 1/0)
        (_conv((3, 3, 1, 6), groups=4), r"Conv's groups 4 does not divide its 4 => 6 channels"),
        (_conv((3, 3, 1, 4), pad=(1, 1, 1)), r"Conv's pad \(1, 1, 1, 1, 1, 1\) does not fit"),  # (n or 2n)
        (
            _struct("Flux.MaxPool{2,4}", k=(2, 2), pad=(0, 0, 0, 0), stride=(0, 2)),
            r"MaxPool's stride \(0, 2\)",
        ),
        (_struct("Flux.MaxPool{0,0}", k=(), pad=(), stride=()), "MaxPool has a window of 0 dimensions"),
    ],
)
def test_window_fields_that_disagree_are_named(value: JuliaStruct, message: str) -> None:
    with pytest.raises(ConversionError, match=message) as info:
        from_whole_model(_struct("Flux.Chain{Core.Tuple}", layers=(value,)), path=("model",))
    assert info.value.path == ("model", "layers", 1)


def test_a_norm_whose_channel_count_disagrees_with_its_arrays_is_named() -> None:
    """The port fuzz: a damaged ``chs`` (2^49) sized the BatchNorm that equinox's state then
    allocated (a JAX out-of-memory error for 2 PB) before the arrays were compared with it."""
    stats = {k: np.ones(4, np.float32) for k in ("β", "γ", "μ", "σ²")}
    norm = _struct(
        "Flux.BatchNorm{Base.#identity,Core.Array{Core.Float32,1},Core.Float32,Core.Array{Core.Float32,1}}",
        λ=Singleton("Base.#identity"), **stats, ϵ=np.float32(1e-5), momentum=np.float32(0.1),
        affine=True, track_stats=True, active=None, chs=2**49,
    )  # fmt: skip
    with pytest.raises(ConversionError, match=r"BatchNorm's chs is 562949953421312, its arrays have \[\(4,"):
        from_whole_model(_struct("Flux.Chain{Core.Tuple}", layers=(norm,)), path=("model",))
    # GroupNorm's running statistics are per group (Flux 0.12-0.14: μ = zeros32(G)), its β, γ per
    # channel: such a struct reads (a review found the first form of the check refusing it)
    f32 = np.float32
    group = _struct(
        "Flux.GroupNorm{Base.#identity,Core.Array{Core.Float32,1},Core.Float32,Core.Array{Core.Float32,1}}",
        G=2, λ=Singleton("Base.#identity"), β=np.zeros(4, f32), γ=np.ones(4, f32), μ=np.zeros(2, f32),
        **{"σ²": np.ones(2, f32)}, ϵ=f32(1e-5), momentum=f32(0.1), affine=True, track_stats=True,
        active=None, chs=4,
    )  # fmt: skip
    layer, _ = from_whole_model(_struct("Flux.Chain{Core.Tuple}", layers=(group,)), path=("model",))
    assert layer.children[0].args["channels"] == 4 and layer.children[0].args["groups"] == 2
    # without arrays (affine=false, track_stats=false) nothing can check chs: it is bounded instead
    bare = dict(norm.fields, β=None, γ=None, μ=None, affine=False, track_stats=False, chs=2**49)
    bare["σ²"] = None
    with pytest.raises(ConversionError, match="BatchNorm's chs is 562949953421312, no array holds it"):
        from_whole_model(_struct("Flux.Chain{Core.Tuple}", layers=(JuliaStruct(norm.type, bare),)))


def test_error_carries_the_tree_path() -> None:
    chain = _struct("Flux.Chain{Core.Tuple}", layers=(_dense(2, 2), _struct("Main.Odd")))
    with pytest.raises(ConversionError) as info:
        from_whole_model(chain, path=("model",))
    assert info.value.path == ("model", "layers", 2)


def test_other_layer_structs_and_their_ghost_fields() -> None:
    """Structs as JLD2 ≤ 0.4 stores them (no σ/λ): LayerNorm+Scale, pools, Recur(LSTMCell), Embedding."""
    rng = np.random.default_rng(2)
    f32 = np.float32
    scale = _struct(
        "Flux.Scale{NNlib.#relu,Core.Array{Core.Float32,1},Core.Array{Core.Float32,1}}",
        scale=rng.normal(size=4).astype(f32),
        bias=rng.normal(size=4).astype(f32),
    )
    # Built from pairs: a keyword `ϵ=` would be NFKC-normalised to 'ε' (docs/porting.md §Field names).
    ln_fields = {"diag": scale, "\u03f5": f32(1e-5), "size": (4,), "affine": True}
    layernorm = JuliaStruct("Flux.LayerNorm{NNlib.#relu,Flux.Scale,Core.Float32,1}", ln_fields)
    pool = _struct("Flux.MaxPool{1,2}", k=(2,), pad=(0, 0), stride=(2,))
    lstm_cell = _struct(
        "Flux.LSTMCell{Core.Array{Core.Float32,2},Core.Array{Core.Float32,1},Core.Tuple}",
        Wi=rng.normal(size=(8, 4)).astype(f32), Wh=rng.normal(size=(8, 2)).astype(f32),
        b=rng.normal(size=8).astype(f32), state0=(np.zeros((2, 1), f32), np.ones((2, 1), f32)),
    )  # fmt: skip
    recur = _struct(
        "Flux.Recur{Flux.LSTMCell,Core.Tuple}", cell=lstm_cell, state=(np.zeros((2, 1), f32),) * 2
    )
    emb = _struct("Flux.Embedding{Core.Array{Core.Float32,2}}", weight=rng.normal(size=(4, 10)).astype(f32))
    chain = _struct("Flux.Chain{Core.Tuple}", layers=(emb, layernorm, recur))
    layer, state = from_whole_model(chain)
    assert layer.kinds() == ["Chain", "Embedding", "LayerNorm", "LSTM"]
    assert layer.children[1].args == {"size": (4,), "σ": "relu", "affine": True, "ϵ": 1e-5}
    assert layer.children[2].args == {"in": 4, "out": 2, "recur": True}
    assert list(state["layers"][1]) == ["λ", "diag", "ϵ", "size", "affine"]
    assert list(state["layers"][1]["diag"]) == ["scale", "bias", "σ"]
    assert list(state["layers"][2]["cell"]) == ["Wi", "Wh", "b", "state0"]  # LSTMCell has no σ
    ids = np.array([[1, 5, 10], [2, 2, 3]])  # (sequence, batch) token ids, 1-based
    y = ref.forward(layer, state, ids.T.copy(), flux="0.14")  # Embedding -> (4, 3, 2), then per step
    assert y.shape == (2, 3, 2)
    pooled, pstate = from_whole_model(pool)
    assert pooled == Layer("MaxPool", {"k": (2,), "pad": (0, 0), "stride": (2,)}) and pstate == ()
    _, pstate15 = from_whole_model(pool, flux="0.15")
    assert list(pstate15) == ["k", "pad", "stride"]
