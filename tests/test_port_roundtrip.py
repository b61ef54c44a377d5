"""Round trip as a property: a random model ``m`` -> ``flux_state(m)`` saved + ``flux_julia(m)`` ->
``from_flux(architecture=…)`` computes what ``m`` computes, and what the numpy Flux reference
computes from the same file and text.

Models are random Layer trees of the supported layers with random hyper-parameters (seeded, modest
counts), built with random weights; every float leaf is shifted by positive noise so that
BatchNorm statistics, norms' affine parameters and biases are not at their trivial initial values.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import _flux_reference as ref
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import treexchange as tx
from treexchange._port._arch import parse_architecture
from treexchange._port._eqx import build_equinox
from treexchange._port._spec import Layer

# The Flux version whose semantics the reference follows for each Flux.state era (LayerNorm's ϵ).
REFERENCE_ERA = {"0.14": "0.14", "0.15": "0.16.10"}
ACTS = ["identity", "relu", "tanh", "sigmoid", "elu", "softplus", "swish", "gelu"]


def _conv_out(size: int, k: int, s: int, lo: int, hi: int, d: int) -> int:
    return (size + lo + hi - d * (k - 1) - 1) // s + 1


class _Gen:
    """Random layers whose sizes fit: tracks the Julia sample shape ``(s1, …, sN, C)``."""

    def __init__(self, rng: random.Random, *, nnx: bool) -> None:
        self.rng = rng
        self.nnx = nnx

    def conv(self, size: list[int], ch: int) -> tuple[Layer, list[int], int]:
        r = self.rng
        n = len(size)
        kinds = ["Conv", "Conv", "CrossCor", "ConvTranspose", "DepthwiseConv"]
        kind = r.choice(kinds)
        for _ in range(50):
            kernel = tuple(r.randint(1, 3) for _ in range(n))
            stride = tuple(r.randint(1, 2) for _ in range(n))
            dilation = tuple(r.randint(1, 2) for _ in range(n))
            pad = tuple(r.randint(0, 2) for _ in range(2 * n))
            if kind == "ConvTranspose":
                pad = tuple(
                    min(p, k - 1) for p, k in zip(pad, [k for k in kernel for _ in range(2)], strict=True)
                )
                out = [
                    (size[i] - 1) * stride[i]
                    - pad[2 * i]
                    - pad[2 * i + 1]
                    + dilation[i] * (kernel[i] - 1)
                    + 1
                    for i in range(n)
                ]
            else:
                out = [
                    _conv_out(size[i], kernel[i], stride[i], pad[2 * i], pad[2 * i + 1], dilation[i])
                    for i in range(n)
                ]
            if all(1 <= o <= 12 for o in out):
                break
        else:
            return self.function(), size, ch
        groups = 1
        if kind == "DepthwiseConv":
            cout = ch * r.randint(1, 2)
            groups = ch
        else:
            allowed = [1] if kind == "CrossCor" else [g for g in (1, 2) if ch % g == 0]  # CrossCor: no groups
            if self.nnx and kind == "ConvTranspose":
                allowed = [1]  # Flax's ConvTranspose has no feature groups
            groups = r.choice(allowed)
            cout = groups * r.randint(1, 3)
        args: dict[str, Any] = {
            "kernel": kernel, "in": ch, "out": cout, "σ": r.choice(ACTS), "stride": stride, "pad": pad,
            "dilation": dilation, "bias": r.random() < 0.8,
        }  # fmt: skip
        args["groups"] = groups  # 1 for CrossCor
        if kind == "ConvTranspose":
            args["outpad"] = (0,) * n
        return Layer(kind, args), out, cout

    def pool(self, size: list[int], ch: int) -> tuple[Layer, list[int], int]:
        r = self.rng
        n = len(size)
        kind = r.choice(["MaxPool", "MeanPool", "AdaptiveMaxPool", "AdaptiveMeanPool", "GlobalMeanPool"])
        if kind.startswith("Adaptive"):
            out = [r.randint(1, s) for s in size]
            return Layer(kind, {"out": tuple(out)}), out, ch
        if kind.startswith("Global"):
            return Layer(kind), [1] * n, ch
        k = tuple(r.randint(1, min(2, s)) for s in size)
        stride = tuple(r.randint(1, 2) for _ in range(n))
        pad = tuple(r.randint(0, kk - 1) for kk in k for _ in range(2))
        out = [_conv_out(size[i], k[i], stride[i], pad[2 * i], pad[2 * i + 1], 1) for i in range(n)]
        return Layer(kind, {"k": k, "pad": pad, "stride": stride}), out, ch

    def norm(self, size: list[int], ch: int) -> tuple[Layer, list[int], int]:
        r = self.rng
        kind = r.choice(["BatchNorm", "BatchNorm", "GroupNorm", "InstanceNorm"])
        args: dict[str, Any] = {
            "channels": ch,
            "σ": r.choice(ACTS),
            "ϵ": r.choice([1e-5, 1e-3]),
            "momentum": 0.1,
        }
        if kind == "BatchNorm":
            args.update(affine=r.random() < 0.8, track_stats=True)
        elif kind == "GroupNorm":
            args.update(
                groups=r.choice([g for g in (1, 2, 4) if ch % g == 0]), affine=True, track_stats=False
            )
        else:
            args.update(affine=r.random() < 0.5, track_stats=False)
        return Layer(kind, args), size, ch

    def function(self) -> Layer:
        return Layer("function", {"name": self.rng.choice(ACTS)})

    def mlp(self) -> tuple[Layer, tuple[int, ...]]:
        """Feature-vector models: Dense, LayerNorm, Dropout, Bilinear and the containers."""
        r = self.rng
        width = r.randint(2, 6)
        shape = (width,)
        layers: list[Layer] = []

        def dense(n_in: int, n_out: int) -> Layer:
            return Layer("Dense", {"in": n_in, "out": n_out, "σ": r.choice(ACTS), "bias": r.random() < 0.8})

        for _ in range(r.randint(1, 4)):
            step = r.choice(
                ["dense", "layernorm", "dropout", "parallel", "skip", "maxout", "bilinear", "function"]
            )
            if step == "dense":
                out = r.randint(2, 6)
                layers.append(dense(width, out))
                width = out
            elif step == "layernorm":
                args = {
                    "size": (width,),
                    "σ": r.choice(ACTS),
                    "affine": r.random() < 0.7,
                    "ϵ": r.choice([1e-5, 0.1]),
                }
                layers.append(Layer("LayerNorm", args))
            elif step == "dropout":
                layers.append(Layer("Dropout", {"p": r.choice([0.1, 0.5])}))
            elif step == "parallel":
                a, b = r.randint(1, 4), r.randint(1, 4)
                layers.append(Layer("Parallel", {"connection": "vcat"}, (dense(width, a), dense(width, b))))
                width = a + b
            elif step == "skip":
                layers.append(Layer("SkipConnection", {"connection": "+"}, (dense(width, width),)))
            elif step == "maxout":
                out = r.randint(2, 5)
                layers.append(
                    Layer("Maxout", children=(dense(width, out), dense(width, out), dense(width, out)))
                )
                width = out
            elif step == "bilinear":
                out = r.randint(2, 5)
                args = {"in": (width, width), "out": out, "σ": r.choice(ACTS), "bias": r.random() < 0.8}
                layers.append(Layer("Bilinear", args))
                width = out
            else:
                layers.append(self.function())
        layers.append(dense(width, 3))
        return Layer("Chain", children=tuple(layers)), shape

    def model(self) -> tuple[Layer, tuple[int, ...]]:
        r = self.rng
        if r.random() < 0.35:
            return self.mlp()
        n = r.randint(1, 2)
        size = [r.randint(5, 9) for _ in range(n)]
        ch = r.randint(1, 4)
        shape = (*size, ch)
        layers: list[Layer] = []
        for _ in range(r.randint(1, 4)):
            step = r.choice(["conv", "conv", "pool", "norm", "function", "skip"])
            if step == "skip":  # a shape-preserving Conv inside SkipConnection(…, +)
                k = tuple(r.choice([1, 3]) for _ in size)
                pad = tuple(v for kk in k for v in ((kk - 1) // 2, (kk - 1) // 2))
                conv = Layer("Conv", {"kernel": k, "in": ch, "out": ch, "σ": r.choice(ACTS), "pad": pad})
                layers.append(Layer("SkipConnection", {"connection": "+"}, (conv,)))
                continue
            if step == "function":
                layers.append(self.function())
                continue
            layer, size, ch = getattr(self, step)(size, ch)
            layers.append(layer)
        if self.nnx and ch > 1 and layers and layers[-1].kind not in ("Conv", "CrossCor", "ConvTranspose"):
            # The nnx reader learns the channel count of flattened data only from a conv right
            # before the flatten (see test_nnx_flatten_after_a_non_conv_layer below).
            ones = (1,) * len(size)
            layers.append(Layer("Conv", {"kernel": ones, "in": ch, "out": ch, "σ": r.choice(ACTS)}))
        features = int(np.prod(size)) * ch
        hidden = r.randint(2, 6)
        layers += [
            Layer("flatten"),
            Layer("Dense", {"in": features, "out": hidden, "σ": r.choice(ACTS), "bias": r.random() < 0.8}),
            Layer("Dense", {"in": hidden, "out": 3}),
        ]
        if r.random() < 0.3:
            layers.append(Layer("function", {"name": "softmax"}))
        return Layer("Chain", children=tuple(layers)), shape


@pytest.mark.parametrize("era", ["0.14", "0.15"])
def test_parser_reads_what_the_julia_printer_writes(era: str) -> None:
    """parse_architecture(julia_constructor(L)) == L with Flux's defaults, for random layer trees."""
    from treexchange._port._registry import julia_constructor, with_defaults

    for seed in range(150):
        layer, _ = _Gen(random.Random(seed), nnx=seed % 2 == 0).model()
        text = julia_constructor(layer, era)
        assert parse_architecture(text) == with_defaults(layer), text


def _perturb(tree: Any, seed: int) -> Any:
    """Shift every float array by positive noise (variances stay positive)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    rng = np.random.default_rng(seed)
    out = [
        leaf + jnp.asarray(rng.uniform(0.0, 0.3, leaf.shape), leaf.dtype)
        if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jnp.floating)
        else leaf
        for leaf in leaves
    ]
    return jax.tree_util.tree_unflatten(treedef, out)


def _constructor(julia: str) -> str:
    (line,) = [ln for ln in julia.splitlines() if ln.startswith("model = ")]
    return line[len("model = ") :].removesuffix(" |> f64")


def _run_equinox(built: Any, x_jl: np.ndarray) -> np.ndarray:
    """One-sample Equinox model on a Julia batch (…, N): C0, ``x_py = rev(x_jl)`` per sample."""
    x_py = jnp.asarray(x_jl.transpose(range(x_jl.ndim)[::-1]))
    if isinstance(built, tuple):
        model, state = built
        y = jax.vmap(lambda s: model(s, state)[0])(x_py)
    else:
        y = jax.vmap(built)(x_py)
    y = np.asarray(y)
    return y.transpose(range(y.ndim)[::-1])


def _seeds(seeds: range, quick: int) -> list[Any]:
    """The first ``quick`` seeds in the default run, the others in the slow tier (10-40 s each)."""
    return [s if i < quick else pytest.param(s, marks=pytest.mark.slow) for i, s in enumerate(seeds)]


@pytest.mark.parametrize("seed", _seeds(range(20), 4))
def test_equinox_round_trip(seed: int, tmp_path: Path) -> None:
    layer, shape = _Gen(random.Random(seed), nnx=False).model()
    era = "0.14" if seed % 3 == 0 else "0.15"
    model = build_equinox(layer, key=jax.random.key(seed), flux=era)
    built: Any = model
    if any(sub.kind == "BatchNorm" for sub in layer.walk()):
        built = (model, eqx.nn.State(model))
    built = _perturb(built, seed)
    text = _constructor(tx.flux_julia(built, flux=era))
    path = tmp_path / "m.jld2"
    tx.save(path, model_state=tx.flux_state(built, flux=era))
    again = tx.from_flux(path, "model_state", architecture=text, flux=era)
    x = np.random.default_rng(seed).normal(size=(*shape, 3)).astype(np.float32)
    y = _run_equinox(built, x)
    np.testing.assert_allclose(_run_equinox(again, x), y, rtol=1e-6, atol=1e-6)
    expected = ref.forward(parse_architecture(text), tx.load(path, "model_state"), x, flux=REFERENCE_ERA[era])
    np.testing.assert_allclose(y, expected, rtol=2e-4, atol=2e-5 * max(1.0, float(np.abs(expected).max())))


def _run_nnx(model: Any, x_jl: np.ndarray) -> np.ndarray:
    """A Flax nnx model on a Julia batch: channels-last ``x_jl.transpose(n-1, n-3, …, 0, n-2)``."""
    n = x_jl.ndim
    to_flax = (n - 1, *range(n - 3, -1, -1), n - 2) if n > 2 else (1, 0)
    y = np.asarray(model(jnp.asarray(x_jl.transpose(to_flax))))
    back = (n - 1, *range(n - 3, -1, -1), n - 2) if y.ndim > 2 else (1, 0)
    return y.transpose(np.argsort(back))


@pytest.mark.parametrize("seed", _seeds(range(100, 108), 1))
def test_nnx_round_trip(seed: int, tmp_path: Path) -> None:
    from flax import nnx

    from treexchange._port._nnx import build_nnx

    layer, shape = _Gen(random.Random(seed), nnx=True).model()
    era = "0.15"
    model = build_nnx(layer, rngs=nnx.Rngs(seed), flux=era)
    graphdef, variables = nnx.split(model)
    model = nnx.merge(graphdef, _perturb(variables, seed))
    text = _constructor(tx.flux_julia(model, flux=era))
    path = tmp_path / "m.jld2"
    tx.save(path, model_state=tx.flux_state(model, flux=era))
    again = tx.from_flux(path, "model_state", architecture=text, flux=era, target="nnx")
    x = np.random.default_rng(seed).normal(size=(*shape, 3)).astype(np.float32)
    y = _run_nnx(model, x)
    np.testing.assert_allclose(_run_nnx(again, x), y, rtol=1e-6, atol=1e-6)
    expected = ref.forward(parse_architecture(text), tx.load(path, "model_state"), x)
    np.testing.assert_allclose(y, expected, rtol=2e-4, atol=2e-5 * max(1.0, float(np.abs(expected).max())))


@pytest.mark.parametrize("seed", _seeds(range(200, 206), 2))
def test_linen_round_trip(seed: int, tmp_path: Path) -> None:
    """The same property for Flax linen: ``(module, variables)`` -> file + Julia text -> from_flux."""
    from treexchange._port._linen import build_linen

    layer, shape = _Gen(random.Random(seed), nnx=True).model()
    module, abstract = build_linen(layer)
    zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), abstract)
    model = (module, _perturb(zeros, seed))
    text = _constructor(tx.flux_julia(model))
    path = tmp_path / "m.jld2"
    tx.save(path, model_state=tx.flux_state(model))
    again = tx.from_flux(path, "model_state", architecture=text, target="linen")

    def run(m: Any) -> np.ndarray:
        return _run_nnx(lambda x: m[0].apply(m[1], x), x)

    x = np.random.default_rng(seed).normal(size=(*shape, 3)).astype(np.float32)
    y = run(model)
    np.testing.assert_allclose(run(again), y, rtol=1e-6, atol=1e-6)
    expected = ref.forward(parse_architecture(text), tx.load(path, "model_state"), x)
    np.testing.assert_allclose(y, expected, rtol=2e-4, atol=2e-5 * max(1.0, float(np.abs(expected).max())))


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        ("Chain(MaxPool((1, 2)), Flux.flatten, Dense(16 => 3))", (4, 4, 2)),
        ("Chain(GroupNorm(2, 2), Flux.flatten, Dense(32 => 3))", (4, 4, 2)),
        ("Chain(Flux.flatten, Dense(48 => 3))", (4, 4, 3)),  # no layer reveals the channel count
        ("Chain(Flux.flatten, Dense(15 => 2))", (5, 3)),  # 1-D data: the 2nd Julia dim is channels
        ("Chain(Flux.flatten, Dense(24 => 2))", (2, 3, 2, 2)),  # 3-D data
        (
            "Chain(Conv((3, 3), 2 => 3), MaxPool((2, 2)), Dropout(0.5), Flux.flatten, Dense(3 => 2))",
            (4, 4, 2),
        ),
        ("Chain(Conv((1, 1), 2 => 4), BatchNorm(4, relu), Flux.flatten, Dense(64 => 2))", (4, 4, 2)),
        (
            "Chain(SkipConnection(Conv((1, 1), 2 => 2), +), MeanPool((2, 2)), Flux.flatten, Dense(8 => 2))",
            (4, 4, 2),
        ),
    ],
)
def test_nnx_flatten_after_a_non_conv_layer(text: str, shape: tuple[int, ...], tmp_path: Path) -> None:
    """Flux's column-major flatten whatever precedes it: both directions (the built model's own
    Flux.state, and a perturbed Julia-side state restored into a fresh model) against the reference."""
    from flax import nnx

    from treexchange._port._nnx import build_nnx

    model = build_nnx(parse_architecture(text), rngs=nnx.Rngs(0))
    path = tmp_path / "m.jld2"
    tx.save(path, model_state=tx.flux_state(model))
    x = np.random.default_rng(0).normal(size=(*shape, 3)).astype(np.float32)
    expected = ref.forward(parse_architecture(text), tx.load(path, "model_state"), x)
    np.testing.assert_allclose(_run_nnx(model, x), expected, rtol=2e-4, atol=2e-5)
    # Julia -> Python: a state the model did not produce (scaled, so variances stay positive),
    # restored into a freshly built model.
    state = tx.load(path, "model_state")
    rng = np.random.default_rng(1)
    state = jax.tree_util.tree_map(
        lambda a: (
            (a * rng.uniform(0.5, 1.5, size=a.shape)).astype(a.dtype)
            if isinstance(a, np.ndarray) and np.issubdtype(a.dtype, np.floating)
            else a
        ),
        state,
    )
    fresh = tx.restore(
        state, like=build_nnx(parse_architecture(text), rngs=nnx.Rngs(5)), layout=tx.flux_state
    )
    expected = ref.forward(parse_architecture(text), state, x)
    np.testing.assert_allclose(
        _run_nnx(fresh, x), expected, rtol=2e-4, atol=2e-5 * max(1.0, float(np.abs(expected).max()))
    )
