"""The Flax nnx target: a runnable nnx model from a :class:`Layer` tree, and an nnx model read back
as its Flux twin.

Built models take a batch, channels last (docs/porting.md §Data layout). A Flux layer with an activation
becomes the nnx module followed by the JAX function in the enclosing ``nnx.Sequential``.

Per-layer array maps (Julia array -> Flax leaf, exact), from docs/porting.md §Supported layers:

=================  ===============================================================================
Dense              ``kernel = W.T`` (``_nnx_layers.Flatten`` flattens in Flux's order, so a Dense
                   after it needs no column permutation, whatever the channel count; §1.4)
Conv/Depthwise     ``kernel = flip_sp(W.transpose(N-1, …, 0, N, N+1))``; ``feature_group_count``
CrossCor           ``kernel = W.transpose(N-1, …, 0, N, N+1)`` (no flip)
ConvTranspose      ``kernel = W.transpose(N-1, …, 0, N+1, N)`` (no flip), explicit dilated padding
Embedding          ``embedding = W.T``
BatchNorm          ``scale = γ``, ``bias = β``, ``mean = μ``, ``var = σ²``; ``momentum = 1 − m``
GroupNorm          ``scale = γ``, ``bias = β``; InstanceNorm = ``nnx.InstanceNorm``
LayerNorm          ``scale``, ``bias`` (one feature dim); ``epsilon = ϵ²`` (Flux 0.15–0.16.10)
=================  ===============================================================================
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from .._errors import TreePath, UnsupportedError
from . import _nnx_layers as NL
from ._activations import function_of
from ._flaxread import FlaxLayoutReader, refuse_layernorm_on_feature_maps, scale_shape, value
from ._jaxops import learnt_initial_state
from ._layout import (
    julia_pad,
    layernorm_eps,
    python_padding,
    rev,
    transpose_padding,
)
from ._perm import SAME, Perm, Transpose
from ._registry import (
    ACTIVATED,
    CELLS,
    RECURRENT_GATES,
    ClassReaders,
    builder,
    class_reader,
    register_target,
    with_defaults,
    wrapped_kind,
)
from ._spec import DEFAULT_FLUX_ERA, Layer
from ._state import KEEP, Port, bare_cell

# === building ======================================================================================


def build_nnx(layer: Layer, *, rngs: Any, flux: str = DEFAULT_FLUX_ERA) -> Any:
    """A runnable Flax nnx model for a Flux layer tree (weights random; restore a state into it).

    Example:
        >>> from flax import nnx
        >>> import jax.numpy as jnp
        >>> conv = Layer("Conv", {"kernel": (3, 3), "in": 1, "out": 2, "σ": "relu"})
        >>> net = Layer("Chain", children=(conv,))
        >>> build_nnx(net, rngs=nnx.Rngs(0))(jnp.ones((4, 8, 8, 1))).shape
        (4, 6, 6, 2)
    """

    return _one(with_defaults(layer), rngs, flux)


def _build(layer: Layer, rngs: Any, era: str) -> list[Any]:
    module = builder("nnx", layer.kind)(layer, rngs, era)
    act = layer.arg("σ", "identity")
    if layer.kind in ACTIVATED and act != "identity":
        return [module, function_of(act)]
    return [module]


def _one(layer: Layer, rngs: Any, era: str) -> Any:

    modules = _build(layer, rngs, era)
    return modules[0] if len(modules) == 1 else NL.Activated(modules[0], str(layer.args["σ"]))


def _build_chain(layer: Layer, rngs: Any, era: str) -> Any:
    refuse_layernorm_on_feature_maps(layer, "nnx")
    if layer.names:
        return NL.NamedChain([_one(c, rngs, era) for c in layer.children], tuple(layer.names))
    flat: list[Any] = []
    for child in layer.children:
        flat += _build(child, rngs, era)
    return nnx.Sequential(*flat)


def _build_dense(layer: Layer, rngs: Any, era: str) -> Any:

    a = layer.args
    return nnx.Linear(a["in"], a["out"], use_bias=a["bias"], rngs=rngs)


def _build_conv(layer: Layer, rngs: Any, era: str) -> Any:
    a = layer.args
    common: dict[str, Any] = dict(
        kernel_size=rev(a["kernel"]),
        strides=rev(a["stride"]),
        kernel_dilation=rev(a["dilation"]),
        use_bias=a["bias"],
        rngs=rngs,
    )
    if layer.kind == "ConvTranspose":
        if a["groups"] != 1:
            raise UnsupportedError("Flax nnx ConvTranspose has no groups (feature_group_count)")
        return nnx.ConvTranspose(
            a["in"], a["out"], padding=transpose_padding(a), transpose_kernel=False, **common
        )
    groups = a["in"] if layer.kind == "DepthwiseConv" else a["groups"]
    conv = nnx.Conv(a["in"], a["out"], padding=python_padding(a["pad"]), feature_group_count=groups, **common)
    return NL.CrossCor(conv) if layer.kind == "CrossCor" else conv


def _build_pool(layer: Layer, rngs: Any, era: str) -> Any:

    a = layer.args
    cls = NL.MaxPool if layer.kind == "MaxPool" else NL.MeanPool
    return cls(rev(a["k"]), rev(a["stride"]), python_padding(a["pad"]))


def _build_norm(layer: Layer, rngs: Any, era: str) -> Any:

    a = layer.args
    affine = dict(use_bias=a["affine"], use_scale=a["affine"])
    if layer.kind == "BatchNorm":
        if not a["track_stats"]:
            raise UnsupportedError("BatchNorm(track_stats=false) has no Flax equivalent in inference mode")
        return nnx.BatchNorm(
            a["channels"],
            use_running_average=True,
            momentum=1.0 - float(a["momentum"]),  # Flux: new = (1-m)·old + m·batch; Flax: the reverse
            epsilon=float(a["ϵ"]),
            rngs=rngs,
            **affine,
        )
    if a["track_stats"]:
        raise UnsupportedError(f"{layer.kind}(track_stats=true): Flax keeps no running statistics for it")
    if layer.kind == "InstanceNorm":
        return nnx.InstanceNorm(a["channels"], epsilon=float(a["ϵ"]), rngs=rngs, **affine)
    return nnx.GroupNorm(a["channels"], num_groups=a["groups"], epsilon=float(a["ϵ"]), rngs=rngs, **affine)


def _build_layernorm(layer: Layer, rngs: Any, era: str) -> Any:

    a = layer.args
    if len(a["size"]) != 1:
        raise UnsupportedError("Flax nnx LayerNorm over more than one dim is not ported yet; use Equinox")
    return nnx.LayerNorm(
        a["size"][0],
        epsilon=layernorm_eps(a["ϵ"], era),
        use_bias=a["affine"],
        use_scale=a["affine"],
        rngs=rngs,
    )


def _build_scale(layer: Layer, rngs: Any, era: str) -> Any:
    shape = scale_shape(layer.args["size"])  # Flux's init: scale ones, bias zeros
    return NL.Scale(jnp.ones(shape), jnp.zeros(shape) if layer.args["bias"] else None)


def _build_bilinear(layer: Layer, rngs: Any, era: str) -> Any:

    a = layer.args
    in1, in2 = a["in"]
    bound = 1.0 / math.sqrt(in1 * in2)
    key = rngs.params()
    k1, k2 = jax.random.split(key)
    weight = jax.random.uniform(k1, (a["out"], in1, in2), minval=-bound, maxval=bound)
    bias = jax.random.uniform(k2, (a["out"],), minval=-bound, maxval=bound) if a["bias"] else None
    return NL.Bilinear(weight, bias, a["σ"])


def _build_other(layer: Layer, rngs: Any, era: str) -> Any:
    a = layer.args
    kind = layer.kind
    if kind in ("AdaptiveMaxPool", "AdaptiveMeanPool"):
        return NL.AdaptivePool("max" if kind == "AdaptiveMaxPool" else "mean", rev(a["out"]))
    if kind in ("GlobalMaxPool", "GlobalMeanPool"):
        return NL.GlobalPool("max" if kind == "GlobalMaxPool" else "mean")
    if kind == "flatten":
        return NL.Flatten()
    if kind == "function":
        function_of(str(a["name"]))  # an unknown name fails here, at build time
        return NL.Function(str(a["name"]))
    if kind == "Embedding":
        return nnx.Embed(a["in"], a["out"], rngs=rngs)
    if kind == "Dropout":
        return nnx.Dropout(float(a["p"]), deterministic=True)
    if kind == "AlphaDropout":
        return NL.AlphaDropout(float(a["p"]))
    children = [_one(c, rngs, era) for c in layer.children]
    if kind == "Parallel":
        return NL.Parallel(children, a.get("connection", "+"), layer.names)
    if kind == "SkipConnection":
        return NL.SkipConnection(children[0], a.get("connection", "+"))
    if kind == "PairwiseFusion":
        return NL.PairwiseFusion(children, a.get("connection", "+"))
    if kind == "Maxout":
        return NL.Maxout(children)
    raise UnsupportedError(f"no Flax nnx builder for the Flux layer {kind!r} yet")  # pragma: no cover


def _build_recurrent(layer: Layer, rngs: Any, era: str) -> Any:
    """Flux's RNN/LSTM/GRU/GRUv3 as :class:`~._nnx_layers.Recurrence`, a bare cell (``GRUCell``) as
    :class:`~._nnx_layers.Cell` (Flux's init: Glorot-uniform matrices, zero bias; the values are
    replaced by a restore anyway)."""

    kind, n_in, hidden = wrapped_kind(layer.kind), int(layer.args["in"]), int(layer.args["out"])
    gates = RECURRENT_GATES[kind]
    init = jax.nn.initializers.glorot_uniform()
    k1, k2, k3 = jax.random.split(rngs.params(), 3)
    wi = init(k1, (gates * hidden, n_in))
    wh = init(k2, ((2 if kind == "GRUv3" else gates) * hidden, hidden))
    wc = init(k3, (hidden, hidden)) if kind == "GRUv3" else None
    act = str(layer.args.get("σ", "tanh"))
    bias = jnp.zeros(gates * hidden) if layer.arg("bias", True) else None  # (Flux ≥ 0.15: bias=false)
    if layer.kind in CELLS:
        return NL.Cell(kind, wi, wh, bias, wc, act)
    returning = bool(layer.arg("return_state", False))
    return NL.Recurrence(kind, wi, wh, bias, wc, act, learnt_initial_state(layer), returning)


def _build_attention(layer: Layer, rngs: Any, era: str) -> Any:
    """Flux's MultiHeadAttention as ``nnx.MultiHeadAttention``, which has one input size for keys and
    values and one size for q, k and v (Equinox's has all of Flux's sizes)."""

    a = layer.args
    if a["k_in"] != a["v_in"] or a["qk_dim"] != a["v_dim"]:
        raise UnsupportedError(
            "nnx.MultiHeadAttention needs k_in == v_in and qk_dim == v_dim; this Flux layer is "
            f"({a['q_in']}, {a['k_in']}, {a['v_in']}) => ({a['qk_dim']}, {a['v_dim']}) => {a['out']} "
            "(target='equinox' ports it)"
        )
    return nnx.MultiHeadAttention(
        num_heads=int(a["nheads"]),
        in_features=int(a["q_in"]),
        qkv_features=int(a["qk_dim"]),
        out_features=int(a["out"]),
        in_kv_features=int(a["k_in"]),
        use_bias=bool(a["bias"]),
        dropout_rate=float(a["dropout_prob"]),
        deterministic=True,
        decode=False,
        rngs=rngs,
    )


# === reading =======================================================================================


def read_nnx(model: Any, *, flux: str = DEFAULT_FLUX_ERA) -> Port:
    """A Flax nnx model read as its Flux twin.

    Example:
        >>> from flax import nnx
        >>> port = read_nnx(nnx.Sequential(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), nnx.relu))
        >>> port.layer.children[0].args["σ"], port.children[0].arrays["weight"][1]
        ('relu', Transpose(axes=(1, 0)))
    """
    port = _Reader(flux).read(model, ())
    refuse_layernorm_on_feature_maps(port.layer, "nnx", reading=True)
    return port


class _Reader(FlaxLayoutReader):
    max_pool = staticmethod(nnx.max_pool)
    avg_pool = staticmethod(nnx.avg_pool)

    def read(self, m: Any, path: TreePath) -> Port:
        if isinstance(m, nnx.Linear):
            port = self.linear(m)
        else:
            port = self.read_module(m, path)
        self.track(m, port, path)
        return port

    def read_module(self, m: Any, path: TreePath) -> Port:
        """``m`` as its Flux layer, by the reader registered for its class (the nearest in its MRO,
        see ``_READERS``); then Flax's pooling functions and plain callables (functions)."""
        reader = class_reader(_BY_CLASS, m)
        if reader is not None:
            return reader(self, m, path)
        if isinstance(m, nnx.Module):
            raise UnsupportedError(
                f"no Flux layer for {type(m).__module__}.{type(m).__qualname__} (see docs/porting.md)",
                path=path,
            )
        return self.function(m, path)  # a function, or functools.partial(nnx.max_pool, …)

    # --- one reader per module class (registered in _READERS) ----------------------------------------
    def sequential(self, m: Any, path: TreePath) -> Port:
        return self.chain(list(m.layers), (*path, "layers"))

    def linear_module(self, m: Any, path: TreePath) -> Port:
        return self.linear(m)

    def crosscor(self, m: Any, path: TreePath) -> Port:
        return self.conv(m.conv, path, "CrossCor")

    def conv_module(self, m: Any, path: TreePath) -> Port:
        return self.conv(m, path, "ConvTranspose" if isinstance(m, nnx.ConvTranspose) else "Conv")

    def pool_module(self, m: Any, path: TreePath) -> Port:
        kind = "MeanPool" if isinstance(m, NL.MeanPool) else "MaxPool"
        return Port(Layer(kind, {"k": rev(m.window), "stride": rev(m.strides), "pad": julia_pad(m.padding)}))

    def adaptive(self, m: Any, path: TreePath) -> Port:
        kind = "AdaptiveMaxPool" if m.op == "max" else "AdaptiveMeanPool"
        return Port(Layer(kind, {"out": rev(m.out)}))

    def global_pool(self, m: Any, path: TreePath) -> Port:
        return Port(Layer("GlobalMaxPool" if m.op == "max" else "GlobalMeanPool"))

    def flatten(self, m: Any, path: TreePath) -> Port:
        return Port(Layer("flatten"))

    def norm_module(self, m: Any, path: TreePath) -> Port:
        return self.groupnorm(m, path, isinstance(m, nnx.InstanceNorm))

    def embedding(self, m: Any, path: TreePath) -> Port:
        layer = Layer("Embedding", {"in": int(m.num_embeddings), "out": int(m.features)})
        return Port(layer, {"weight": (value(m.embedding), Transpose((1, 0)))})

    def dropout(self, m: Any, path: TreePath) -> Port:
        if isinstance(m, NL.AlphaDropout):
            return Port(Layer("AlphaDropout", {"p": m.p}))
        port = Port(Layer("Dropout", {"p": float(m.rate)}))
        # (nnx.Dropout(rate, rngs=rngs) holds an RNG stream, its count and key: no Flux state, so a
        # restore keeps the model's own)
        stream = getattr(m, "rngs", None)
        for name in ("count", "key"):
            variable = getattr(stream, name, None)
            if variable is not None:
                port.fixed.append((value(variable), KEEP))
        return port

    def scale_module(self, m: Any, path: TreePath) -> Port:
        return self.scale(value(m.weight), value(m.bias) if m.bias is not None else None)

    def bilinear(self, m: Any, path: TreePath) -> Port:
        weight = value(m.weight)
        out, in1, in2 = weight.shape
        args = {"in": (int(in1), int(in2)), "out": int(out), "σ": m.activation, "bias": m.bias is not None}
        arrays: dict[str, tuple[Any, Perm]] = {"weight": (weight, SAME)}
        if m.bias is not None:
            arrays["bias"] = (value(m.bias), SAME)
        return Port(Layer("Bilinear", args), arrays)

    def named_chain(self, m: Any, path: TreePath) -> Port:
        ports = tuple(self.read(c, (*path, "layers", n)) for c, n in zip(m.layers, m.names))
        return Port(Layer("Chain", {}, tuple(p.layer for p in ports), m.names), children=ports)

    def connected(self, m: Any, path: TreePath) -> Port:
        """``Parallel``, ``PairwiseFusion`` or ``Maxout``: the layers, and the connection if any."""
        ports = tuple(self.read(c, (*path, "layers", i + 1)) for i, c in enumerate(m.layers))
        args = {} if isinstance(m, NL.Maxout) else {"connection": m.connection}
        names = getattr(m, "names", None)
        return Port(Layer(type(m).__name__, args, tuple(p.layer for p in ports), names), children=ports)

    def skip(self, m: Any, path: TreePath) -> Port:
        inner = self.read(m.layers, (*path, "layers"))
        layer = Layer("SkipConnection", {"connection": m.connection}, (inner.layer,))
        return Port(layer, children=(inner,))

    def function_entry(self, m: Any, path: TreePath) -> Port:
        return Port(Layer("function", {"name": m.name}))

    def recurrence_module(self, m: Any, path: TreePath) -> Port:
        return self.recurrence(m)

    def cell_module(self, m: Any, path: TreePath) -> Port:
        return bare_cell(self.recurrence(m))

    def activated(self, m: Any, path: TreePath) -> Port:
        port = self.read(m.layer, (*path, "layer"))
        port.layer = dataclasses.replace(port.layer, args={**port.layer.args, "σ": m.activation})
        return port

    def own_entry(self, item: Any) -> bool:
        return isinstance(item, NL.Function)


# === the registry entries: one builder and one reader per kind ======================================

_BUILDERS: list[tuple[tuple[str, ...], Callable[..., Any]]] = [
    (("Chain",), _build_chain),
    (("Parallel", "SkipConnection", "PairwiseFusion", "Maxout"), _build_other),
    (("Dense",), _build_dense),
    (("Bilinear",), _build_bilinear),
    (("Scale",), _build_scale),
    (("Embedding",), _build_other),
    (("Conv", "DepthwiseConv", "CrossCor", "ConvTranspose"), _build_conv),
    (("MaxPool", "MeanPool"), _build_pool),
    (("AdaptiveMaxPool", "AdaptiveMeanPool", "GlobalMaxPool", "GlobalMeanPool", "flatten"), _build_other),
    (("function",), _build_other),
    (("Dropout", "AlphaDropout"), _build_other),
    (("BatchNorm",), _build_norm),
    (("GroupNorm", "InstanceNorm"), _build_norm),
    (("LayerNorm",), _build_layernorm),
    (("MultiHeadAttention",), _build_attention),
    (("RNN", "LSTM", "GRU", "GRUv3", *CELLS), _build_recurrent),
]
_READERS: ClassReaders = [
    (("Chain",), (nnx.Sequential,), _Reader.sequential),
    ((), (NL.NamedChain,), _Reader.named_chain),
    (
        ("Parallel", "PairwiseFusion", "Maxout"),
        (NL.Parallel, NL.PairwiseFusion, NL.Maxout),
        _Reader.connected,
    ),
    (("SkipConnection",), (NL.SkipConnection,), _Reader.skip),
    ((), (NL.Activated,), _Reader.activated),
    (("function",), (NL.Function,), _Reader.function_entry),
    (("Dense",), (nnx.Linear,), _Reader.linear_module),
    (("Bilinear",), (NL.Bilinear,), _Reader.bilinear),
    (("Scale",), (NL.Scale,), _Reader.scale_module),
    (("Embedding",), (nnx.Embed,), _Reader.embedding),
    (("Conv", "DepthwiseConv", "ConvTranspose"), (nnx.Conv, nnx.ConvTranspose), _Reader.conv_module),
    (("CrossCor",), (NL.CrossCor,), _Reader.crosscor),
    (("MaxPool", "MeanPool"), (NL.MaxPool,), _Reader.pool_module),  # MeanPool is a MaxPool subclass
    (("AdaptiveMaxPool", "AdaptiveMeanPool"), (NL.AdaptivePool,), _Reader.adaptive),
    (("GlobalMaxPool", "GlobalMeanPool"), (NL.GlobalPool,), _Reader.global_pool),
    (("flatten",), (NL.Flatten,), _Reader.flatten),
    (("BatchNorm",), (nnx.BatchNorm,), _Reader.batchnorm),
    (("GroupNorm", "InstanceNorm"), (nnx.GroupNorm, nnx.InstanceNorm), _Reader.norm_module),
    (("LayerNorm",), (nnx.LayerNorm,), _Reader.layernorm),
    (("Dropout", "AlphaDropout"), (nnx.Dropout, NL.AlphaDropout), _Reader.dropout),
    (("MultiHeadAttention",), (nnx.MultiHeadAttention,), _Reader.attention),
    (("RNN", "LSTM", "GRU", "GRUv3"), (NL.Recurrence,), _Reader.recurrence_module),
    (tuple(CELLS), (NL.Cell,), _Reader.cell_module),
]
_BY_CLASS = register_target("nnx", _BUILDERS, _READERS)
