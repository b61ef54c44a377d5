"""Numerics per layer rule, both directions, Equinox and Flax nnx, against the numpy Flux reference.

For every case: build the framework model from the Flux :class:`Layer`, read its ``Flux.state``
(Python -> Julia), replace every array by random values, restore that state into the model
(Julia -> Python, through the rule's permutations), run it on a random input laid out by the data
convention C0 (docs/porting.md §Data layout), and compare with ``tests/_flux_reference.forward`` (Flux/NNlib
semantics: true convolution, column-major flatten, BatchNorm test mode) on the Julia-shaped
input. The restored model's ``flux_state`` must give back the random arrays exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _flux_reference import forward
from flax import nnx

import treexchange as tx
from treexchange._port import load_state
from treexchange._port._eqx import build_equinox
from treexchange._port._linen import build_linen
from treexchange._port._nnx import build_nnx
from treexchange._port._spec import Layer

L = Layer


def dense(i: int, o: int, **kw: Any) -> Layer:
    return L("Dense", {"in": i, "out": o, **kw})


def bn(channels: int, **kw: Any) -> Layer:
    return L("BatchNorm", {"channels": channels, **kw})


# (id, layer, Julia input shape or ("ids", vocab, n) / ("pair", shape1, shape2), targets)
BOTH = ("eqx", "nnx")
# (NNlib activations jax.nn has no function for: the port's own, from NNlib's definitions; the fast
# roundings of tanh and σ are those)
OWN_ACTIVATIONS = (
    "lisht", "tanhshrink", "trelu", "softshrink", "logcosh", "gelu_sigmoid", "tanh_fast", "sigmoid_fast",
)  # fmt: skip
# Base's math functions of a number (SIREN's sin): jax.numpy's, against numpy's in the reference
BASE_MATH = ("sin", "cos", "tan", "exp", "expm1", "abs", "sinh", "cosh", "atan", "asinh", "cbrt")
CASES: list[tuple[str, Layer, Any, tuple[str, ...]]] = [
    ("dense-tanh", dense(5, 3, σ="tanh"), (5, 4), BOTH),
    ("dense-nobias", dense(5, 3, bias=False), (5, 4), BOTH),
    *((f"dense-{act}", dense(5, 3, σ=act), (5, 4), BOTH) for act in OWN_ACTIVATIONS),
    *((f"dense-{act}", dense(5, 3, σ=act), (5, 4), BOTH) for act in BASE_MATH),
    (
        "conv2d-stride-asympad-dilation",
        L(
            "Conv",
            {
                "kernel": (3, 2),
                "in": 3,
                "out": 4,
                "σ": "relu",
                "stride": (2, 1),
                "pad": (1, 0, 2, 1),
                "dilation": (1, 2),
            },
        ),
        (9, 10, 3, 2),
        BOTH,
    ),
    (
        "conv1d-groups-dilation",
        L("Conv", {"kernel": (3,), "in": 4, "out": 6, "groups": 2, "dilation": (2,)}),
        (11, 4, 2),
        BOTH,
    ),
    (
        "conv3d-pad",
        L("Conv", {"kernel": (2, 3, 2), "in": 2, "out": 3, "pad": (1, 1, 0, 0, 1, 0)}),
        (5, 4, 3, 2, 2),
        BOTH,
    ),
    ("conv-nobias", L("Conv", {"kernel": (3, 3), "in": 2, "out": 2, "bias": False}), (6, 6, 2, 1), BOTH),
    (
        "depthwiseconv",
        L("DepthwiseConv", {"kernel": (3, 3), "in": 3, "out": 6, "groups": 3}),
        (7, 7, 3, 2),
        BOTH,
    ),
    ("crosscor", L("CrossCor", {"kernel": (3, 2), "in": 2, "out": 3, "stride": (2, 2)}), (8, 9, 2, 2), BOTH),
    (
        "convtranspose-stride-pad-outpad",
        L(
            "ConvTranspose",
            {"kernel": (3, 3), "in": 4, "out": 2, "stride": (2, 2), "pad": (1, 1, 1, 1), "outpad": (1, 0)},
        ),
        (5, 4, 4, 2),
        BOTH,
    ),
    (
        "convtranspose-dilation-asympad",
        L(
            "ConvTranspose",
            {
                "kernel": (2, 3),
                "in": 3,
                "out": 2,
                "stride": (3, 1),
                "pad": (0, 1, 2, 0),
                "dilation": (1, 2),
                "σ": "sigmoid",
            },
        ),
        (4, 6, 3, 2),
        BOTH,
    ),
    (
        "convtranspose-groups",
        L("ConvTranspose", {"kernel": (3,), "in": 4, "out": 6, "groups": 2, "stride": (2,)}),
        (5, 4, 2),
        ("eqx",),  # Flax ConvTranspose has no groups
    ),
    ("maxpool", L("MaxPool", {"k": (2, 2)}), (8, 9, 2, 2), BOTH),
    (
        "maxpool-stride-pad",
        L("MaxPool", {"k": (3, 2), "stride": (2, 1), "pad": (1, 0, 0, 1)}),
        (8, 9, 2, 2),
        BOTH,
    ),
    ("meanpool-pad", L("MeanPool", {"k": (2, 2), "pad": (1, 1, 1, 1)}), (7, 6, 3, 2), BOTH),
    ("meanpool-1d", L("MeanPool", {"k": (3,)}), (9, 2, 2), BOTH),
    ("adaptivemaxpool", L("AdaptiveMaxPool", {"out": (2, 3)}), (8, 9, 2, 2), BOTH),
    ("adaptivemeanpool", L("AdaptiveMeanPool", {"out": (3, 2)}), (9, 8, 2, 2), BOTH),
    ("globalmaxpool", L("GlobalMaxPool"), (5, 4, 3, 2), BOTH),
    ("globalmeanpool", L("GlobalMeanPool"), (5, 4, 3, 2), BOTH),
    (
        "conv-flatten-dense",
        L(
            "Chain",
            children=(
                L("Conv", {"kernel": (3, 3), "in": 2, "out": 3, "σ": "relu"}),
                L("MaxPool", {"k": (2, 2)}),
                L("flatten"),
                dense(3 * 3 * 2, 4),
            ),
        ),
        (8, 7, 2, 3),
        BOTH,
    ),
    (
        "nested-chains-flatten-dense",
        L(
            "Chain",
            children=(
                L(
                    "Chain",
                    children=(L("Conv", {"kernel": (3, 3), "in": 2, "out": 3, "σ": "relu"}), L("flatten")),
                ),
                L("Chain", children=(dense(3 * 6 * 5, 4, σ="relu"), dense(4, 2))),
            ),
            names=("features", "head"),
        ),
        (8, 7, 2, 3),
        BOTH,
    ),
    # (a BatchNorm with an activation is built inside a Chain: Equinox passes state through Sequential)
    (
        "batchnorm-conv",
        L("Chain", children=(L("BatchNorm", {"channels": 3, "σ": "relu"}),)),
        (5, 4, 3, 2),
        BOTH,
    ),
    ("batchnorm-dense", L("BatchNorm", {"channels": 4, "ϵ": 1e-3, "momentum": 0.2}), (4, 5), BOTH),
    ("batchnorm-noaffine", L("BatchNorm", {"channels": 3, "affine": False}), (4, 4, 3, 2), BOTH),
    ("groupnorm", L("GroupNorm", {"channels": 6, "groups": 2}), (4, 5, 6, 2), BOTH),
    ("instancenorm", L("InstanceNorm", {"channels": 3, "affine": True}), (5, 4, 3, 2), BOTH),
    ("instancenorm-noaffine", L("InstanceNorm", {"channels": 3}), (5, 4, 3, 2), BOTH),
    ("layernorm", L("LayerNorm", {"size": (5,), "ϵ": 1e-3}), (5, 3), BOTH),
    ("layernorm-2d", L("LayerNorm", {"size": (4, 3)}), (4, 3, 2), ("eqx",)),
    (
        "dropout",
        L("Chain", children=(dense(4, 3), L("Dropout", {"p": 0.3}), L("AlphaDropout", {"p": 0.2}))),
        (4, 2),
        BOTH,
    ),
    ("embedding", L("Embedding", {"in": 10, "out": 4}), ("ids", 10, 6), BOTH),
    ("scale-tanh", L("Scale", {"size": (3,), "σ": "tanh"}), (3, 4), BOTH),
    ("scale-2d-nobias", L("Scale", {"size": (4, 3), "bias": False}), (4, 3, 2), BOTH),
    (
        "conv-then-scale",
        L(
            "Chain",
            children=(L("Conv", {"kernel": (3, 3), "in": 2, "out": 3}), L("Scale", {"size": (4, 3, 3)})),
        ),
        (6, 5, 2, 2),
        BOTH,
    ),
    ("bilinear", L("Bilinear", {"in": (3, 4), "out": 2, "σ": "tanh"}), ("pair", (3, 5), (4, 5)), BOTH),
    ("softmax-entry", L("Chain", children=(dense(4, 3), L("function", {"name": "softmax"}))), (4, 2), BOTH),
    (
        "named-chain",
        L("Chain", children=(dense(4, 3, σ="relu"), dense(3, 2)), names=("enc", "dec")),
        (4, 2),
        BOTH,
    ),
    (
        "skipconnection",
        L("SkipConnection", {"connection": "+"}, (L("Chain", children=(dense(4, 4, σ="relu"),)),)),
        (4, 3),
        BOTH,
    ),
    (
        "parallel-vcat",
        L("Parallel", {"connection": "vcat"}, (dense(4, 2), dense(4, 3, σ="relu"))),
        (4, 3),
        BOTH,
    ),
    (
        "parallel-conv-cat",
        L(
            "Parallel",
            {"connection": "+"},
            (
                L("Conv", {"kernel": (1, 1), "in": 2, "out": 3}),
                L("Conv", {"kernel": (3, 3), "in": 2, "out": 3, "pad": (1, 1, 1, 1)}),
            ),
        ),
        (5, 5, 2, 2),
        BOTH,
    ),
    (
        "pairwisefusion",
        L("PairwiseFusion", {"connection": "+"}, (dense(4, 4), dense(4, 4, σ="tanh"))),
        (4, 3),
        BOTH,
    ),
    ("maxout", L("Maxout", children=(dense(4, 3), dense(4, 3))), (4, 3), BOTH),
    # A BatchNorm inside a connection layer: Equinox threads eqx.nn.State through Parallel,
    # SkipConnection, PairwiseFusion and Maxout as Sequential does (inference mode, running statistics).
    (
        "skipconnection-batchnorm",
        L("SkipConnection", {"connection": "+"}, (L("Chain", children=(dense(4, 4), bn(4, σ="relu"))),)),
        (4, 3),
        BOTH,
    ),
    ("skipconnection-bare-batchnorm", L("SkipConnection", {"connection": "*"}, (bn(3),)), (5, 3, 2), BOTH),
    (
        "parallel-batchnorm",
        L("Parallel", {"connection": "vcat"}, (bn(4, σ="relu"), dense(4, 3), L("Chain", children=(bn(4),)))),
        (4, 3),
        BOTH,
    ),
    (
        "pairwisefusion-batchnorm",
        L(
            "PairwiseFusion",
            {"connection": "+"},
            (bn(4), L("Chain", children=(dense(4, 4), bn(4, σ="tanh")))),
        ),
        (4, 3),
        BOTH,
    ),
    ("maxout-batchnorm", L("Maxout", children=(bn(4), dense(4, 4))), (4, 3), BOTH),
    (
        "chain-skip-parallel-batchnorm",
        L(
            "Chain",
            children=(
                dense(4, 4),
                L(
                    "SkipConnection",
                    {"connection": "+"},
                    (L("Parallel", {"connection": "+"}, (bn(4), bn(4))),),
                ),
                bn(4),
            ),
        ),
        (4, 3),
        BOTH,
    ),
]


def _params() -> list[Any]:
    out = []
    for case_id, layer, shape, targets in CASES:
        # linen stores what nnx stores, in the same layouts: every nnx case runs for linen too
        for target in (*targets, "linen") if "nnx" in targets else targets:
            out.append(pytest.param(layer, shape, target, id=f"{case_id}-{target}"))
    return out


def _random_input(spec: Any, rng: np.random.Generator) -> Any:
    if spec[0] == "ids":
        return rng.integers(1, spec[1] + 1, size=(spec[2],))
    if spec[0] == "pair":
        return (
            rng.standard_normal(spec[1]).astype(np.float32),
            rng.standard_normal(spec[2]).astype(np.float32),
        )
    return rng.standard_normal(spec).astype(np.float32)


def _randomised(state: Any, rng: np.random.Generator) -> Any:
    """The same state with every array replaced by random values (variances kept positive)."""
    if isinstance(state, tx.NamedTuple):
        return tx.NamedTuple(
            (k, _positive(v, rng) if k == "σ²" else _randomised(v, rng)) for k, v in state.items()
        )
    if isinstance(state, tuple):
        return tuple(_randomised(v, rng) for v in state)
    if isinstance(state, np.ndarray) and state.dtype.kind == "f":
        return rng.standard_normal(state.shape).astype(state.dtype)
    return state


def _positive(v: Any, rng: np.random.Generator) -> Any:
    return rng.uniform(0.5, 1.5, np.shape(v)).astype(np.float32) if isinstance(v, np.ndarray) else v


def _arrays(state: Any) -> list[np.ndarray]:
    if isinstance(state, np.ndarray):
        return [state]
    if isinstance(state, tx.NamedTuple):
        return [a for v in state.values() for a in _arrays(v)]
    if isinstance(state, tuple):
        return [a for v in state for a in _arrays(v)]
    return []


# --- data layouts (docs/porting.md §Data layout) ---------------------------------------------------


def _rev(a: np.ndarray) -> np.ndarray:
    return a.transpose(tuple(range(a.ndim))[::-1])


def _to_flax(a: np.ndarray) -> np.ndarray:
    n = a.ndim
    if n <= 2:
        return _rev(a)
    return a.transpose(n - 1, *range(n - 3, -1, -1), n - 2)  # (N, s_nsp…s1, C)


def _from_flax(a: np.ndarray) -> np.ndarray:
    n = a.ndim
    if n <= 2:
        return _rev(a)
    return a.transpose(*range(n - 2, 0, -1), n - 1, 0)


def _run_eqx(layer: Layer, x: Any, rng: np.random.Generator) -> tuple[Any, Any, Any]:
    model = build_equinox(layer, key=jax.random.key(1))
    stateful = any(isinstance(m, eqx.nn.BatchNorm) for m in jax.tree_util.tree_leaves(model, is_leaf=_is_bn))
    like: Any = (model, eqx.nn.State(model)) if stateful else model
    state = _randomised(tx.flux_state(like), rng)
    restored = load_state(like, state)
    if stateful:
        model, estate = restored

        def call(xi: Any) -> Any:
            return model(xi, estate)[0]
    else:
        call = restored
    if layer.kind == "Embedding":
        y = jax.vmap(call)(jnp.asarray(x - 1))  # Julia ids are 1-based
    elif isinstance(x, tuple):
        y = jax.vmap(call)(jnp.asarray(_rev(x[0])), jnp.asarray(_rev(x[1])))
    else:
        y = jax.vmap(call)(jnp.asarray(_rev(x)))
    out = tuple(_rev(np.asarray(v)) for v in y) if isinstance(y, tuple) else _rev(np.asarray(y))
    return out, state, restored


def _is_bn(m: Any) -> bool:
    return isinstance(m, eqx.nn.BatchNorm)


def _run_nnx(layer: Layer, x: Any, rng: np.random.Generator) -> tuple[Any, Any, Any]:
    model = build_nnx(layer, rngs=nnx.Rngs(1))
    state = _randomised(tx.flux_state(model), rng)
    restored = load_state(model, state)
    if layer.kind == "Embedding":
        y = restored(jnp.asarray(x - 1))
    elif isinstance(x, tuple):
        y = restored(jnp.asarray(_rev(x[0])), jnp.asarray(_rev(x[1])))
    else:
        y = restored(jnp.asarray(_to_flax(x)))
    out = tuple(_from_flax(np.asarray(v)) for v in y) if isinstance(y, tuple) else _from_flax(np.asarray(y))
    return out, state, restored


def _run_linen(layer: Layer, x: Any, rng: np.random.Generator) -> tuple[Any, Any, Any]:
    """Flax linen: ``(module, variables)``; the built variable shapes are those ``module.init`` gives."""
    module, abstract = build_linen(layer)
    if layer.kind == "Embedding":
        args: tuple[Any, ...] = (jnp.asarray(x - 1),)
    elif isinstance(x, tuple):
        args = (jnp.asarray(_rev(x[0])), jnp.asarray(_rev(x[1])))
    else:
        args = (jnp.asarray(_to_flax(x)),)
    initialised = module.init(jax.random.key(0), *args)
    assert jax.tree_util.tree_map(lambda a: (a.shape, a.dtype), initialised) == jax.tree_util.tree_map(
        lambda a: (a.shape, a.dtype), abstract
    )
    state = _randomised(tx.flux_state((module, initialised)), rng)
    restored = load_state((module, abstract), state)
    y = restored[0].apply(restored[1], *args)
    out = tuple(_from_flax(np.asarray(v)) for v in y) if isinstance(y, tuple) else _from_flax(np.asarray(y))
    return out, state, restored


RUN = {"eqx": _run_eqx, "nnx": _run_nnx, "linen": _run_linen}


@pytest.mark.parametrize(("layer", "shape", "target"), _params())
def test_layer_matches_flux_reference_both_directions(layer: Layer, shape: Any, target: str) -> None:
    rng = np.random.default_rng(7)
    x = _random_input(shape, rng)
    got, state, restored = RUN[target](layer, x, rng)
    want = forward(layer, state, x)
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)
    else:
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    # Python -> Julia again: the restored model's Flux.state carries the random arrays exactly.
    again = tx.flux_state(restored)
    mine, theirs = _arrays(again), _arrays(state)
    assert len(mine) == len(theirs) and all(np.array_equal(a, b) for a, b in zip(mine, theirs))


def test_layernorm_after_conv_normalises_fluxs_first_dims(tmp_path: Path) -> None:
    """``Chain(Conv((3, 3), 2 => 4), LayerNorm(6))``: Flux normalises dim 1 (the width) of the
    ``(W, H, C, N)`` maps. Equinox (a sample is Julia's dims reversed, ``(C, H, W)``) normalises
    its last axis, row by row (``eqx.nn.LayerNorm`` refused the 3-d sample); nnx and linen, whose
    maps are channels-last, are refused rather than normalising the channels. A ConvTranspose
    whose output padding is not below its stride (Flux and PyTorch allow it) is refused by
    Equinox only."""
    from treexchange._port._arch import parse_architecture
    from treexchange._port._eqx import build_equinox

    text = "Chain(Conv((3, 3), 2 => 4), LayerNorm(6))"
    rng = np.random.default_rng(36)
    model = build_equinox(parse_architecture(text), key=jax.random.key(0))
    model = jax.tree_util.tree_map(lambda a: a + jnp.asarray(rng.normal(size=a.shape), a.dtype), model)
    tx.save(tmp_path / "ln.jld2", s=tx.flux_state(model))
    state = tx.load(tmp_path / "ln.jld2", "s")
    x = rng.normal(size=(8, 5, 2, 1)).astype(np.float32)  # Julia (W, H, C, N)
    want = forward(parse_architecture(text), state, x)  # (6, 3, 4, 1)
    ported = tx.from_flux(tmp_path / "ln.jld2", "s", text)
    got = np.asarray(ported(jnp.asarray(x[..., 0].transpose(2, 1, 0))))  # (C, H, W)
    np.testing.assert_allclose(got, want[..., 0].transpose(2, 1, 0), rtol=1e-5, atol=1e-5)
    for target in ("nnx", "linen"):
        with pytest.raises(tx.UnsupportedError, match="channels-last"):
            tx.from_flux(tmp_path / "ln.jld2", "s", text, target=target)
    from treexchange._port._nnx import build_nnx

    for nested in (  # (wherever the LayerNorm sits after the conv; not after a vec)
        "Chain(Conv((3, 3), 1 => 2), SkipConnection(LayerNorm(4), +))",
        "Chain(Conv((3, 3), 1 => 2), Parallel(+, LayerNorm(4), identity))",
        "Chain(Conv((3, 3), 1 => 2), Chain(ln = LayerNorm(4)))",
    ):
        with pytest.raises(tx.UnsupportedError, match="channels-last"):
            build_nnx(parse_architecture(nested), rngs=nnx.Rngs(0))
    build_nnx(parse_architecture("Chain(Conv((3, 3), 1 => 2), vec, LayerNorm(4))"), rngs=nnx.Rngs(0))
    r = nnx.Rngs(0)  # the other way: an nnx LayerNorm of conv maps normalises the channels
    with pytest.raises(tx.UnsupportedError, match="normalises the channels"):
        tx.flux_state(nnx.Sequential(nnx.Conv(1, 4, (3, 3), rngs=r), nnx.LayerNorm(4, rngs=r)))
    w = rng.normal(size=(3, 2, 2)).astype(np.float32)
    tx.save(
        tmp_path / "ct.jld2",
        s=tx.NamedTuple(
            layers=(
                tx.NamedTuple(
                    σ=(),
                    weight=w,
                    bias=np.zeros(2, np.float32),
                    stride=(1,),
                    pad=(0, 0),
                    outpad=(1,),
                    dilation=(2,),
                    groups=1,
                ),
            )
        ),
    )
    outpadded = "Chain(ConvTranspose((3,), 2 => 2; outpad=1, dilation=2))"
    with pytest.raises(tx.UnsupportedError, match="output padding below its stride"):
        tx.from_flux(tmp_path / "ct.jld2", "s", outpadded)
    x1 = rng.normal(size=(1, 5, 2)).astype(np.float32)  # (batch, width, channels)
    by_nnx = tx.from_flux(tmp_path / "ct.jld2", "s", outpadded, target="nnx")(x1)
    module, params = tx.from_flux(tmp_path / "ct.jld2", "s", outpadded, target="linen")
    assert by_nnx.shape == (1, 5 + 4 + 1, 2)  # Flux: (in − 1)·s + d(k − 1) + 1 + outpad
    np.testing.assert_allclose(np.asarray(by_nnx), np.asarray(module.apply(params, x1)), rtol=1e-6, atol=1e-6)


def test_nnx_dropout_with_its_rng_stream_restores(tmp_path: Path) -> None:
    """``nnx.Dropout(0.5, rngs=rngs)`` (the usual way) holds an RNG stream (count, key) with no Flux
    state: a restore into it was refused ("the layout does not cover … rngs.count.value"); it keeps
    the model's own stream and loads the Dense."""
    rngs = nnx.Rngs(0)
    model = nnx.Sequential(nnx.Linear(3, 2, rngs=rngs), nnx.Dropout(0.5, rngs=rngs))
    tx.save(tmp_path / "d.jld2", model_state=tx.flux_state(model))
    fresh = nnx.Sequential(nnx.Linear(3, 2, rngs=nnx.Rngs(5)), nnx.Dropout(0.5, rngs=nnx.Rngs(5)))
    restored = tx.load(tmp_path / "d.jld2", "model_state", like=fresh, layout=tx.flux_state)
    np.testing.assert_array_equal(
        np.asarray(restored.layers[0].kernel[...]), np.asarray(model.layers[0].kernel[...])
    )
    assert int(restored.layers[1].rngs.count[...]) == int(fresh.layers[1].rngs.count[...])
