"""Acceptance: real Julia-trained models built by ``tx.from_flux`` with no template, on MNIST.

Each model is also checked against the numpy Flux reference (tests/_flux_reference.py) on a few
inputs, so a model that classifies well but computes something else than Flux would still fail.
Images: convention C0 (docs/porting.md §Data layout), the Equinox sample is ``rev`` of the Julia sample.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import _flux_reference as ref
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _mnist import julia_batch, mnist_test_set
from conftest import present_cases, require_fixture

import treexchange as tx
from treexchange import ConversionError
from treexchange._port._fromflux import read_flux_source

LENET = (
    "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)), "
    "Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
)


TARGETS = ["equinox", "nnx", "linen"]


def _batched(fn: Callable[[Any], Any], images: np.ndarray, size: int = 2500) -> np.ndarray:
    run = jax.jit(jax.vmap(fn))
    return np.concatenate(
        [np.asarray(run(jnp.asarray(images[i : i + size]))) for i in range(0, len(images), size)]
    )


def _run(built: Any, target: str, x: np.ndarray) -> np.ndarray:
    """Run a built model on a channels-first batch ``x``; outputs channels-first too.

    Equinox models take one sample (vmapped here; ``(model, state)`` with BatchNorm); Flax nnx
    models take a channels-last batch, and so does a Flax linen ``(module, variables)``.
    """
    if target == "equinox":
        if isinstance(built, tuple):
            model, state = built
            return _batched(lambda s: model(s, state)[0], x)
        return _batched(built, x)
    if target == "linen":
        module, variables = built
        built = jax.jit(lambda batch: module.apply(variables, batch))
    last = (0, *range(2, x.ndim), 1)
    xs = x.transpose(last) if x.ndim > 2 else x
    outs = [np.asarray(built(jnp.asarray(xs[i : i + 2500]))) for i in range(0, len(xs), 2500)]
    y = np.concatenate(outs)
    return y.transpose(np.argsort(last)) if y.ndim > 2 else y


def _close_to_reference(out: np.ndarray, expected: np.ndarray) -> None:
    """float32 model vs float64 reference: equal to float32 precision at the outputs' scale."""
    scale = float(np.abs(expected).max())
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("target", TARGETS)
def test_vqvae_whole_model_reconstructs_digits(target: str) -> None:
    path = require_fixture("flux-model/vqvae_autoencoder7x7x16.jld2")
    images, _ = mnist_test_set()
    x = images / 255  # the author's scaling: pixels in [0, 1/255]
    y = _run(tx.from_flux(path, "autoencoder", target=target), target, x)
    rel = float(np.mean((y - x) ** 2) / np.mean(x**2))
    assert rel <= 0.08, rel
    layer, flux_state = read_flux_source(path, "autoencoder")
    expected = ref.forward(layer, flux_state, julia_batch(x[:4]))
    _close_to_reference(julia_batch(y[:4]), expected)


HWDR = "flux-model/hwdr_mlp.jld2"


@pytest.mark.parametrize("target", present_cases([(t,) for t in TARGETS], relpath=lambda case: HWDR))
def test_hwdr_whole_model_classifies_mnist(target: str) -> None:
    path = require_fixture(HWDR)
    images, labels = mnist_test_set()
    flat = images.reshape(len(images), -1)  # Flux.flatten of the Julia batch = row-major NCHW ravel
    probs = _run(tx.from_flux(path, "mlp", target=target), target, flat)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    accuracy = float(np.mean(probs.argmax(axis=1) == labels))
    assert accuracy >= 0.86, accuracy
    layer, flux_state = read_flux_source(path, "mlp")
    expected = ref.forward(layer, flux_state, ref.flatten(julia_batch(images[:16])))
    _close_to_reference(probs[:16].T, expected)


@pytest.mark.parametrize("target", TARGETS)
def test_lenet_state_with_its_architecture_classifies_mnist(target: str) -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    images, labels = mnist_test_set()
    logits = _run(tx.from_flux(path, "lenet_state", architecture=LENET, target=target), target, images)
    accuracy = float(np.mean(logits.argmax(axis=1) == labels))
    assert accuracy >= 0.975, accuracy
    layer, flux_state = read_flux_source(path, "lenet_state", LENET)
    expected = ref.forward(layer, flux_state, julia_batch(images[:8]))
    _close_to_reference(logits[:8].T, expected)


def test_from_flux_errors() -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    with pytest.raises(ConversionError, match="pass architecture="):
        tx.from_flux(path, "lenet_state")
    with pytest.raises(ConversionError, match=r"unknown layer 'Conv2D' at line 1, column 7"):
        tx.from_flux(path, "lenet_state", architecture="Chain(Conv2D((5, 5), 1 => 6))")
    with pytest.raises(ConversionError, match=r"lenet_state.layers\[8\].weight"):
        tx.from_flux(path, "lenet_state", architecture=LENET.replace("Dense(84 => 10)", "Dense(84 => 12)"))
    with pytest.raises(ValueError, match="target must be"):
        tx.from_flux(path, "lenet_state", architecture=LENET, target="torch")


def test_equinox_models_are_fully_concrete_and_a_fresh_state_starts_from_the_file() -> None:
    """from_flux builds by shape only; every leaf must still come out a real array, and the
    BatchNorm StateIndex inits hold the file's running statistics."""
    import equinox as eqx

    path = require_fixture("flux-model/vqvae_autoencoder7x7x16.jld2")
    model, state = tx.from_flux(path, "autoencoder")
    leaves = jax.tree_util.tree_leaves((model, state))
    assert leaves and all(isinstance(leaf, jax.Array) for leaf in leaves if hasattr(leaf, "shape"))
    x = np.random.default_rng(0).uniform(size=(1, 28, 28)).astype(np.float32) / 255
    fresh = eqx.nn.State(model)
    np.testing.assert_array_equal(np.asarray(model(x, fresh)[0]), np.asarray(model(x, state)[0]))
    flux_state = tx.load(path, "autoencoder")["layers"][0]["layers"][1]
    bn = model.layers[0].layers[1]
    mean, var = state.get(bn.ema_state_index)
    np.testing.assert_array_equal(np.asarray(mean), flux_state["μ"])
    np.testing.assert_array_equal(np.asarray(var), flux_state["σ²"])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "text",
    [
        "Chain(Dense(4 => 3), relu, Dense(3 => 2), tanh)",
        "Chain(Conv((3, 3), 2 => 3), BatchNorm(3), relu, MaxPool((2, 2)), Flux.flatten, Dense(12 => 2), "
        "softmax)",
    ],
)
def test_from_flux_keeps_the_authors_chain(target: str, text: str, tmp_path: Any) -> None:
    """Standalone functions stay Chain entries of their own: the built model's Flux.state has the
    author's shape (``()`` per function), so the author's file restores into it and what it saves
    is what Flux.loadmodel! expects for the author's architecture."""
    from treexchange._port._arch import parse_architecture
    from treexchange._port._eqx import build_equinox

    layer = parse_architecture(text)
    source = build_equinox(layer, key=jax.random.key(3))
    stateful = "BatchNorm" in text
    import equinox as eqx

    author = tx.flux_state((source, eqx.nn.State(source)) if stateful else source)
    assert len(author.layers) == len(layer.children)  # e.g. (Dense, (), Dense, ())
    assert sum(entry == () for entry in author.layers) >= 2
    path = tmp_path / "author.jld2"
    tx.save(path, model_state=author)
    built = tx.from_flux(path, "model_state", architecture=text, target=target)
    assert tx.values_equal(tx.flux_state(built), tx.load(path, "model_state"))
    assert tx.flux_julia(built).splitlines()[1] == f"model = {text}"
    again = tx.load(path, "model_state", like=built, layout=tx.flux_state)  # the author's file fits
    x = np.random.default_rng(0).normal(size=(2, 2, 6, 6) if stateful else (2, 4)).astype(np.float32)
    expected = ref.forward(layer, tx.load(path, "model_state"), x.transpose(np.arange(x.ndim)[::-1]))
    _close_to_reference(_run(again, target, x), expected.transpose(np.arange(expected.ndim)[::-1]))


def _named_norm_state(rng: np.random.Generator) -> dict[str, Any]:
    """A ``Flux.state`` of ``Chain(a = Dense(2 => 4), b = BatchNorm(4, relu))`` with trained-looking
    running statistics (so inference mode is not the identity normalisation)."""
    f32 = np.float32
    return {
        "layers": {
            "a": {"weight": rng.normal(size=(4, 2)).astype(f32), "bias": rng.normal(size=4).astype(f32),
                  "σ": ()},
            "b": {"λ": (), "β": rng.normal(size=4).astype(f32), "γ": rng.normal(size=4).astype(f32),
                  "μ": rng.normal(size=4).astype(f32), "σ²": rng.uniform(0.5, 2, size=4).astype(f32),
                  "ϵ": f32(1e-5), "momentum": f32(0.1), "affine": True, "track_stats": True,
                  "active": None, "chs": 4},
        }
    }  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
def test_named_chain_with_an_activated_batchnorm(target: str, tmp_path: Any) -> None:
    """``BatchNorm(4, relu)`` inside a named Chain: Equinox built it as a Sequential of (BatchNorm,
    relu), which read back as a nested Chain (a MismatchError restoring the file), and the named
    chain did not pass the BatchNorm state. It must read back as one layer and compute Flux's numbers."""
    from treexchange._port._arch import parse_architecture

    text = "Chain(a = Dense(2 => 4), b = BatchNorm(4, relu))"
    path = tmp_path / "named.jld2"
    tx.save(path, model_state=_named_norm_state(np.random.default_rng(5)))
    built = tx.from_flux(path, "model_state", architecture=text, target=target)
    assert tx.flux_julia(built).splitlines()[1] == f"model = {text}"
    assert tx.values_equal(tx.flux_state(built), tx.load(path, "model_state"))
    x = np.random.default_rng(6).normal(size=(5, 2)).astype(np.float32)
    expected = ref.forward(parse_architecture(text), tx.load(path, "model_state"), x.T)
    out = _run(built, target, x)
    assert (out == 0).any() and (out > 0).any()  # the relu is applied, to a non-trivial output
    _close_to_reference(out, expected.T)


def _batchnorm_state(rng: np.random.Generator, channels: int) -> dict[str, Any]:
    """One Flux ``BatchNorm(channels)``'s ``Flux.state`` with trained-looking running statistics."""
    f32 = np.float32
    return {"λ": (), "β": rng.normal(size=channels).astype(f32), "γ": rng.normal(size=channels).astype(f32),
            "μ": rng.normal(size=channels).astype(f32), "σ²": rng.uniform(0.5, 2, size=channels).astype(f32),
            "ϵ": f32(1e-5), "momentum": f32(0.1), "affine": True, "track_stats": True, "active": None,
            "chs": channels}  # fmt: skip


def _dense_state(rng: np.random.Generator, n_in: int, n_out: int) -> dict[str, Any]:
    f32 = np.float32
    return {"weight": rng.normal(size=(n_out, n_in)).astype(f32), "bias": rng.normal(size=n_out).astype(f32),
            "σ": ()}  # fmt: skip


@pytest.mark.parametrize("target", TARGETS)
def test_batchnorm_inside_skipconnection_and_parallel(target: str, tmp_path: Any) -> None:
    """A BatchNorm inside a SkipConnection and a Parallel: the Equinox ports of those layers did not
    pass ``eqx.nn.State`` on, so the model could not run. Every target must compute Flux's numbers
    (inference mode, the file's running statistics) and give back the file's state."""
    from treexchange._port._arch import parse_architecture

    text = (
        "Chain(Dense(3 => 4), SkipConnection(Chain(Dense(4 => 4), BatchNorm(4, relu)), +), "
        "Parallel(vcat, BatchNorm(4), Dense(4 => 2)), Maxout(BatchNorm(6), Dense(6 => 6)))"
    )
    rng = np.random.default_rng(11)
    skip = {"layers": {"layers": (_dense_state(rng, 4, 4), _batchnorm_state(rng, 4))}, "connection": ()}
    parallel = {"connection": (), "layers": (_batchnorm_state(rng, 4), _dense_state(rng, 4, 2))}
    maxout = {"layers": (_batchnorm_state(rng, 6), _dense_state(rng, 6, 6))}
    path = tmp_path / "skip_parallel_bn.jld2"
    tx.save(path, model_state={"layers": (_dense_state(rng, 3, 4), skip, parallel, maxout)})
    built = tx.from_flux(path, "model_state", architecture=text, target=target)
    assert tx.values_equal(tx.flux_state(built), tx.load(path, "model_state"))
    x = rng.normal(size=(7, 3)).astype(np.float32)
    expected = ref.forward(parse_architecture(text), tx.load(path, "model_state"), x.T)
    _close_to_reference(_run(built, target, x), expected.T)


def _random_state(text: str, flux: str, seed: int) -> Any:
    """A ``Flux.state`` of the era ``flux`` for ``text``, every float array random (variances and
    learnt initial states non-zero), as Julia would hand it over."""
    from treexchange._port._arch import parse_architecture
    from treexchange._port._eqx import build_equinox

    model = build_equinox(parse_architecture(text), key=jax.random.key(0), flux=flux)
    state = tx.flux_state(model, flux=flux)
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda a: (
            rng.uniform(0.5, 1.5, a.shape).astype(a.dtype)
            if isinstance(a, np.ndarray) and a.dtype.kind == "f"
            else a
        ),
        state,
    )


RECUR_TEXT = "Chain(LSTM(3 => 4), RNN(4 => 2))"


@pytest.mark.parametrize("target", TARGETS)
def test_a_flux_014_state_ports_without_naming_its_era(target: str, tmp_path: Any) -> None:
    """A Flux 0.14 ``Flux.state`` (a ``Recur``'s ``state``/``state0``, the cell's ``b``) needed
    ``flux="0.14"`` (else a MismatchError on ``bias``/``b``): its field names say its era. The port
    computes the Flux 0.14 numbers (from the learnt ``state0``), as with ``flux="0.14"`` named."""
    from treexchange._port._arch import parse_architecture

    state = _random_state(RECUR_TEXT, "0.14", 3)
    tx.save(tmp_path / "s.jld2", s=state)
    built = tx.from_flux(tmp_path / "s.jld2", "s", architecture=RECUR_TEXT, target=target)
    named = tx.from_flux(tmp_path / "s.jld2", "s", architecture=RECUR_TEXT, target=target, flux="0.14")
    x = np.random.default_rng(4).normal(size=(3, 6, 2)).astype(np.float32)  # Julia (in, L, B)
    xs = jnp.asarray(x.transpose(2, 1, 0))
    run = {
        "equinox": lambda m: np.asarray(jax.vmap(m)(xs)),
        "nnx": lambda m: np.asarray(m(xs)),
        "linen": lambda m: np.asarray(m[0].apply(m[1], xs)),
    }[target]
    expected = ref.forward(parse_architecture(RECUR_TEXT), state, x, flux="0.14").transpose(2, 1, 0)
    np.testing.assert_allclose(run(built), expected, atol=1e-5)
    np.testing.assert_array_equal(run(built), run(named))
    # a Flux 0.15 state of the same model still ports without flux= (and with it)
    tx.save(tmp_path / "new.jld2", s=_random_state(RECUR_TEXT, "0.15", 5))
    for flux in (None, "0.15"):
        tx.from_flux(tmp_path / "new.jld2", "s", architecture=RECUR_TEXT, target=target, flux=flux)


def test_the_era_of_pools_sets_the_layernorm_of_a_flux_014_state(tmp_path: Any) -> None:
    """Pools stored as ``()`` are Flux 0.14's form: that state's LayerNorm adds ϵ to the standard
    deviation (Flux ≤ 0.14), which the port then computes without ``flux="0.14"``."""
    from treexchange._port._arch import parse_architecture

    text = "Chain(Conv((3, 3), 1 => 2), MaxPool((2, 2)), Flux.flatten, Dense(8 => 4), LayerNorm(4; ϵ=0.5))"
    state = _random_state(text, "0.14", 6)
    assert state["layers"][1] == ()
    tx.save(tmp_path / "s.jld2", s=state)
    built = tx.from_flux(tmp_path / "s.jld2", "s", architecture=text)
    x = np.random.default_rng(7).normal(size=(6, 6, 1, 3)).astype(np.float32)  # Julia (W, H, C, N)
    layer = parse_architecture(text)
    expected = ref.forward(layer, state, x, flux="0.14")
    out = _batched(built, x.transpose(3, 2, 1, 0))
    _close_to_reference(out, expected.T)
    assert np.abs(ref.forward(layer, state, x).T - out).max() > 1e-2  # Flux 0.15's ϵ differs here


def test_a_state_of_two_eras_is_refused(tmp_path: Any) -> None:
    text = "Chain(RNN(3 => 4), MaxPool((2,)))"
    old, new = _random_state(text, "0.14", 1), _random_state(text, "0.15", 1)
    tx.save(tmp_path / "s.jld2", s=tx.NamedTuple(layers=(old["layers"][0], new["layers"][1])))
    with pytest.raises(ConversionError, match=r"mixes Flux eras: s\.layers\[1\] .* s\.layers\[2\]"):
        tx.from_flux(tmp_path / "s.jld2", "s", architecture=text)


@pytest.mark.parametrize("target", ["equinox", "linen", "nnx"])
@pytest.mark.parametrize(
    ("text", "weight"),
    [("Chain(Dense(0 => 4))", (4, 0)), ("Chain(Conv((3, 3), 0 => 4))", (3, 3, 0, 4))],
)
def test_a_layer_with_an_empty_parameter_is_refused_by_name(
    target: str, text: str, weight: tuple[int, ...], tmp_path: Any
) -> None:
    """A zero-size weight is a valid Flux struct (its output is its bias), but equinox's and
    nnx's initialisers divide by its size (a ZeroDivisionError came out: found by the port
    fuzz, a damaged file whose Conv weight had a dimension of 0)."""
    pytest.importorskip("flax") if target != "equinox" else None
    layer = tx.NamedTuple(weight=np.zeros(weight, np.float32), bias=np.zeros(4, np.float32), σ=())
    if len(weight) == 4:
        layer = tx.NamedTuple(σ=(), weight=layer.weight, bias=layer.bias, stride=(1, 1), pad=(0, 0, 0, 0),
                              dilation=(1, 1), groups=1)  # fmt: skip
    path = tmp_path / "empty.jld2"
    tx.save(path, s=tx.NamedTuple(layers=(layer,)))
    with pytest.raises(tx.UnsupportedError, match=r"weight would be .*×0.*, of size 0"):
        tx.from_flux(path, "s", architecture=text, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_parallel_tuple_gives_each_heads_output(target: str, tmp_path: Any) -> None:
    """``Parallel(tuple, decoder, classifier)``: a model with two heads (kewiechecki/SparseEncoders
    saves such a ``Flux.state``; its author wrote the connection ``(args...) -> args``). The port
    returns the heads' outputs as a tuple, each equal to the reference; it was refused as an
    unknown connection."""
    from treexchange._port._arch import parse_architecture
    from treexchange._port._eqx import build_equinox

    text = "Chain(Dense(3 => 4, relu), Parallel(tuple, Dense(4 => 2), Chain(Dense(4 => 5, tanh), softmax)))"
    layer = parse_architecture(text)
    path = tmp_path / "heads.jld2"
    tx.save(path, s=tx.flux_state(build_equinox(layer, key=jax.random.key(5))))
    built = tx.from_flux(path, "s", architecture=text, target=target)
    assert f"model = {text}" in tx.flux_julia(built)
    x = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    if target == "equinox":
        outs = jax.vmap(built)(jnp.asarray(x))
    elif target == "linen":
        module, variables = built
        outs = module.apply(variables, jnp.asarray(x))
    else:
        outs = built(jnp.asarray(x))
    expected = ref.forward(layer, tx.load(path, "s"), x.T)
    assert isinstance(outs, tuple) and len(outs) == 2
    for out, want in zip(outs, expected, strict=True):
        _close_to_reference(np.asarray(out), want.T)


def test_structs_of_another_library_are_named_not_sent_to_architecture(tmp_path: Any) -> None:
    """A ``Matrix{Any}`` of Knet layers (rotsoc/julia-machine-learning) was answered "pass
    architecture=", which cannot help: its structs are named instead."""
    from treexchange._values import JuliaStruct

    linear = JuliaStruct("Main.Linear", {"w": np.ones((2, 3), np.float32), "b": np.zeros(2, np.float32)})
    layers = [linear, linear]
    path = tmp_path / "knet.jld2"
    tx.save(path, results=layers)
    message = r"holds no Flux layers but structs of other types \(Main.Linear; the first at results\[1\]\)"
    with pytest.raises(ConversionError, match=message):
        tx.from_flux(path, "results")


def test_the_state_of_a_struct_of_ones_own_names_the_chain_inside(tmp_path: Any) -> None:
    """``Flux.state(ClustNetwork(l = Chain(…)))`` (JadeOfNameless/DeePWAK) is ``(l = (layers =
    …,),)``: no layer types, and the architecture of the Chain does not fit the struct's state. The
    refusal names the path of the Chain's state, which ports with that architecture."""
    dense = tx.NamedTuple(weight=np.ones((2, 3), np.float32), bias=np.zeros(2, np.float32), σ=())
    path = tmp_path / "own.jld2"
    tx.save(path, pi_s=tx.NamedTuple(l=tx.NamedTuple(layers=(dense,))))
    named = r"state of a Chain at pi_s.l .*tx.from_flux\(path, \('pi_s', 'l'\)"
    with pytest.raises(ConversionError, match=named):
        tx.from_flux(path, "pi_s")
    model = tx.from_flux(path, ("pi_s", "l"), architecture="Chain(Dense(3 => 2))")
    np.testing.assert_array_equal(np.asarray(model(jnp.ones(3))), [3.0, 3.0])
    # a checkpoint (model_state, opt_state): the optimiser's tree has the model's shape but is no
    # model, and its Optimisers.Leaf structs are no model of another library (a review's find)
    from treexchange._values import JuliaStruct

    leaf = JuliaStruct("Optimisers.Leaf", {"rule": JuliaStruct("Optimisers.Adam", {"eta": 0.001}),
                                           "state": (np.zeros(2, np.float32),), "frozen": False})  # fmt: skip
    opt = tx.NamedTuple(layers=(tx.NamedTuple(weight=leaf, bias=leaf, σ=()),))
    tx.save(path, ckpt=tx.NamedTuple(model_state=tx.NamedTuple(layers=(dense,)), opt_state=opt, epoch=3))
    with pytest.raises(ConversionError, match=r"state of a Chain at ckpt.model_state \(") as info:
        tx.from_flux(path, "ckpt")
    assert "opt_state" not in str(info.value) and "other types" not in str(info.value)


@pytest.mark.parametrize("target", TARGETS)
def test_a_parallel_after_a_tuple_gives_each_branch_its_input(target: str, tmp_path: Any) -> None:
    """Flux's ``(m::Parallel)(xs::Tuple) = m(xs...)``: after a layer that returns a tuple (a
    ``Parallel(tuple, …)``, a ``PairwiseFusion``), a Parallel's i-th branch takes the i-th value.
    The port gave every branch the whole tuple (a TypeError at the call; found by a review)."""
    from treexchange._port._arch import parse_architecture
    from treexchange._port._eqx import build_equinox

    text = (
        "Chain(Parallel(tuple, Dense(2 => 3, relu), Dense(2 => 4)), "
        "Parallel(vcat, Dense(3 => 1), Dense(4 => 2)), Dense(3 => 2))"
    )
    layer = parse_architecture(text)
    path = tmp_path / "tuple_in.jld2"
    tx.save(path, s=tx.flux_state(build_equinox(layer, key=jax.random.key(6))))
    built = tx.from_flux(path, "s", architecture=text, target=target)
    x = np.random.default_rng(2).normal(size=(5, 2)).astype(np.float32)
    expected = ref.forward(layer, tx.load(path, "s"), x.T)
    _close_to_reference(_run(built, target, x), expected.T)


def test_vec_as_a_chain_entry_gives_one_vector(tmp_path: Path) -> None:
    """``Chain(Dense(3 => 1, σ), vec)`` (BuiltWithGenie/MRIClassifier ends its CNN so): Julia's
    ``vec`` of the ``(1, B)`` output is ``(B,)``; every target gives the column-major order
    (``ravel`` on the reversed axes), from the text and from a whole model's ``Base.#vec``."""
    rng = np.random.default_rng(34)
    w, b = rng.standard_normal((1, 3)).astype(np.float32), rng.standard_normal(1).astype(np.float32)
    dense = tx.JuliaStruct(
        "Flux.Dense{NNlib.#σ,A,B}", {"weight": w, "bias": b, "σ": tx.Singleton("NNlib.#σ")}
    )
    whole = tx.JuliaStruct("Flux.Chain{Tuple}", {"layers": (dense, tx.Singleton("Base.#vec"))})
    path = tmp_path / "vec.jld2"
    tx.save(path, model=whole, state=tx.NamedTuple(layers=(tx.NamedTuple(weight=w, bias=b, σ=()), ())))
    x = rng.standard_normal((4, 3)).astype(np.float32)  # a batch of 4 (Julia (3, 4))
    want = (1 / (1 + np.exp(-(w @ x.T + b[:, None])))).reshape(-1, order="F")  # vec of (1, 4)
    text = "Chain(Dense(3 => 1, σ), vec)"
    for ported in (
        tx.from_flux(path, "model", target="nnx"),
        tx.from_flux(path, "state", text, target="nnx"),
    ):
        np.testing.assert_allclose(np.asarray(ported(x)), want, rtol=1e-6, atol=1e-6)
    one = tx.from_flux(path, "model")  # Equinox: one sample
    np.testing.assert_allclose(np.asarray(one(x[0])), want[:1], rtol=1e-6, atol=1e-6)
    assert "Chain(Dense(3 => 1, sigmoid), vec)" in tx.flux_julia(one)
