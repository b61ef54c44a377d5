"""The Flax nnx target: a runnable nnx model from a :class:`Layer` tree, and an nnx model read back
as its Flux twin.

Built models take a batch, channels last (layer-spec §0.2). A Flux layer with an activation
becomes the nnx module followed by the JAX function in the enclosing ``nnx.Sequential``.

Per-layer array maps (Julia array -> Flax leaf, exact), from layer-spec §2–3:

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
import functools
import math
from collections.abc import Mapping
from typing import Any

from .._errors import PathSegment, UnsupportedError
from ._activations import ELEMENTWISE, function_of, name_of
from ._eqx import ACTIVATED, chain_port, layernorm_0_14_message, layernorm_eps
from ._perm import SAME, Compose, Perm, Reshape, Transpose, spatial_flip
from ._rules import RECURRENT_GATES, same_padding, with_defaults
from ._spec import DEFAULT_FLUX_ERA, Layer
from ._state import Port

Path = tuple[PathSegment, ...]


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
    builder = _BUILDERS.get(layer.kind)
    if builder is None:
        raise UnsupportedError(f"no Flax nnx builder for the Flux layer {layer.kind!r} yet")
    module = builder(layer, rngs, era)
    act = layer.arg("σ", "identity")
    if layer.kind in ACTIVATED and act != "identity":
        return [module, function_of(act)]
    return [module]


def _one(layer: Layer, rngs: Any, era: str) -> Any:
    from . import _nnx_layers as NL

    modules = _build(layer, rngs, era)
    return modules[0] if len(modules) == 1 else NL.Activated(modules[0], str(layer.args["σ"]))


def _rev(t: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in t)[::-1]


def _padding(pad: tuple[int, ...]) -> list[tuple[int, int]]:
    n = len(pad) // 2
    return [(int(pad[2 * k]), int(pad[2 * k + 1])) for k in reversed(range(n))]


def _build_chain(layer: Layer, rngs: Any, era: str) -> Any:
    from flax import nnx

    from . import _nnx_layers as NL

    if layer.names:
        return NL.NamedChain([_one(c, rngs, era) for c in layer.children], tuple(layer.names))
    flat: list[Any] = []
    for child in layer.children:
        flat += _build(child, rngs, era)
    return nnx.Sequential(*flat)


def _build_dense(layer: Layer, rngs: Any, era: str) -> Any:
    from flax import nnx

    a = layer.args
    return nnx.Linear(a["in"], a["out"], use_bias=a["bias"], rngs=rngs)


def transpose_padding(a: Mapping[str, Any]) -> list[tuple[int, int]]:
    """Flux ConvTranspose pad/outpad -> ``lax.conv_transpose`` pairs: ``(d(k−1) − lo, d(k−1) − hi + outpad)``
    per Python spatial axis (layer-spec §2.8)."""
    n = len(a["kernel"])
    pairs = []
    for j in reversed(range(n)):
        reach = a["dilation"][j] * (a["kernel"][j] - 1)
        pairs.append((reach - a["pad"][2 * j], reach - a["pad"][2 * j + 1] + a["outpad"][j]))
    return pairs


def _build_conv(layer: Layer, rngs: Any, era: str) -> Any:
    from flax import nnx

    from . import _nnx_layers as NL

    a = layer.args
    common: dict[str, Any] = dict(
        kernel_size=_rev(a["kernel"]),
        strides=_rev(a["stride"]),
        kernel_dilation=_rev(a["dilation"]),
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
    conv = nnx.Conv(a["in"], a["out"], padding=_padding(a["pad"]), feature_group_count=groups, **common)
    return NL.CrossCor(conv) if layer.kind == "CrossCor" else conv


def _build_pool(layer: Layer, rngs: Any, era: str) -> Any:
    from . import _nnx_layers as NL

    a = layer.args
    cls = NL.MaxPool if layer.kind == "MaxPool" else NL.MeanPool
    return cls(_rev(a["k"]), _rev(a["stride"]), _padding(a["pad"]))


def _build_norm(layer: Layer, rngs: Any, era: str) -> Any:
    from flax import nnx

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
    from flax import nnx

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


def _build_bilinear(layer: Layer, rngs: Any, era: str) -> Any:
    import jax

    from . import _nnx_layers as NL

    a = layer.args
    in1, in2 = a["in"]
    bound = 1.0 / math.sqrt(in1 * in2)
    key = rngs.params()
    k1, k2 = jax.random.split(key)
    weight = jax.random.uniform(k1, (a["out"], in1, in2), minval=-bound, maxval=bound)
    bias = jax.random.uniform(k2, (a["out"],), minval=-bound, maxval=bound) if a["bias"] else None
    return NL.Bilinear(weight, bias, a["σ"])


def _build_other(layer: Layer, rngs: Any, era: str) -> Any:
    from flax import nnx

    from . import _nnx_layers as NL

    a = layer.args
    kind = layer.kind
    if kind in ("AdaptiveMaxPool", "AdaptiveMeanPool"):
        return NL.AdaptivePool("max" if kind == "AdaptiveMaxPool" else "mean", _rev(a["out"]))
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
    """Flux's RNN/LSTM/GRU/GRUv3 as :class:`~._nnx_layers.Recurrence` (Flux's init: Glorot-uniform
    matrices, zero bias; the values are replaced by a restore anyway)."""
    import jax
    import jax.numpy as jnp

    from . import _nnx_layers as NL

    kind, n_in, hidden = layer.kind, int(layer.args["in"]), int(layer.args["out"])
    gates = RECURRENT_GATES[kind]
    init = jax.nn.initializers.glorot_uniform()
    k1, k2, k3 = jax.random.split(rngs.params(), 3)
    wi = init(k1, (gates * hidden, n_in))
    wh = init(k2, ((2 if kind == "GRUv3" else gates) * hidden, hidden))
    wc = init(k3, (hidden, hidden)) if kind == "GRUv3" else None
    act = str(layer.args.get("σ", "tanh"))
    return NL.Recurrence(kind, wi, wh, jnp.zeros(gates * hidden), wc, act)


def _build_attention(layer: Layer, rngs: Any, era: str) -> Any:
    """Flux's MultiHeadAttention as ``nnx.MultiHeadAttention``, which has one input size for keys and
    values and one size for q, k and v (Equinox's has all of Flux's sizes)."""
    from flax import nnx

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


_BUILDERS: dict[str, Any] = {
    "Chain": _build_chain,
    "RNN": _build_recurrent,
    "LSTM": _build_recurrent,
    "GRU": _build_recurrent,
    "GRUv3": _build_recurrent,
    "MultiHeadAttention": _build_attention,
    "Dense": _build_dense,
    "Bilinear": _build_bilinear,
    "Conv": _build_conv,
    "DepthwiseConv": _build_conv,
    "CrossCor": _build_conv,
    "ConvTranspose": _build_conv,
    "MaxPool": _build_pool,
    "MeanPool": _build_pool,
    "BatchNorm": _build_norm,
    "GroupNorm": _build_norm,
    "InstanceNorm": _build_norm,
    "LayerNorm": _build_layernorm,
    **{
        kind: _build_other
        for kind in (
            "AdaptiveMaxPool", "AdaptiveMeanPool", "GlobalMaxPool", "GlobalMeanPool", "flatten", "function",
            "Embedding", "Dropout", "AlphaDropout", "Parallel", "SkipConnection", "PairwiseFusion", "Maxout",
        )
    },
}  # fmt: skip


# === reading =======================================================================================


def read_nnx(model: Any, *, flux: str = DEFAULT_FLUX_ERA) -> Port:
    """A Flax nnx model read as its Flux twin.

    Example:
        >>> from flax import nnx
        >>> port = read_nnx(nnx.Sequential(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), nnx.relu))
        >>> port.layer.children[0].args["σ"], port.children[0].arrays["weight"][1]
        ('relu', Transpose(axes=(1, 0)))
    """
    return _Reader(flux).read(model, ())


def _value(variable: Any) -> Any:
    return variable.get_value() if hasattr(variable, "get_value") else variable


def _tuple(value: Any, n: int) -> tuple[int, ...]:
    if value is None:
        return (1,) * n
    if isinstance(value, int):
        return (value,) * n
    return tuple(int(v) for v in value)


class _Reader:
    def __init__(self, era: str) -> None:
        self.era = era
        self.conv_data = False  # the data at this point of the model came out of a conv layer
        self.after_unknown = False  # the last module read was a function without an NNlib name

    flatten_hint = "treexchange._port._nnx_layers.Flatten"

    def read(self, m: Any, path: Path) -> Port:
        from flax import nnx

        if isinstance(m, nnx.Linear):
            port = self.linear(m)
        else:
            port = self.read_module(m, path)
        self.track(m, port, path)
        return port

    def read_module(self, m: Any, path: Path) -> Port:
        from flax import nnx

        from . import _nnx_layers as NL

        if isinstance(m, nnx.Sequential):
            return self.chain(list(m.layers), (*path, "layers"))
        if isinstance(m, (nnx.Conv, NL.CrossCor, nnx.ConvTranspose)):
            return self.conv(m, path)
        if isinstance(m, NL.MaxPool):  # MeanPool too
            kind = "MeanPool" if isinstance(m, NL.MeanPool) else "MaxPool"
            return Port(
                Layer(kind, {"k": _rev(m.window), "stride": _rev(m.strides), "pad": _julia_pad(m.padding)})
            )
        if isinstance(m, functools.partial) and m.func in (nnx.max_pool, nnx.avg_pool):
            return self.partial_pool(m, path)
        if isinstance(m, NL.AdaptivePool):
            kind = "AdaptiveMaxPool" if m.op == "max" else "AdaptiveMeanPool"
            return Port(Layer(kind, {"out": _rev(m.out)}))
        if isinstance(m, NL.GlobalPool):
            return Port(Layer("GlobalMaxPool" if m.op == "max" else "GlobalMeanPool"))
        if isinstance(m, NL.Flatten):
            return Port(Layer("flatten"))
        if isinstance(m, nnx.BatchNorm):
            return self.batchnorm(m, path)
        if isinstance(m, (nnx.GroupNorm, nnx.InstanceNorm)):
            return self.groupnorm(m, path)
        if isinstance(m, nnx.LayerNorm):
            return self.layernorm(m, path)
        if isinstance(m, nnx.Embed):
            layer = Layer("Embedding", {"in": int(m.num_embeddings), "out": int(m.features)})
            return Port(layer, {"weight": (_value(m.embedding), Transpose((1, 0)))})
        if isinstance(m, nnx.Dropout):
            return Port(Layer("Dropout", {"p": float(m.rate)}))
        if isinstance(m, NL.AlphaDropout):
            return Port(Layer("AlphaDropout", {"p": m.p}))
        if isinstance(m, NL.Bilinear):
            weight = _value(m.weight)
            out, in1, in2 = weight.shape
            args = {
                "in": (int(in1), int(in2)),
                "out": int(out),
                "σ": m.activation,
                "bias": m.bias is not None,
            }
            arrays: dict[str, tuple[Any, Perm]] = {"weight": (weight, SAME)}
            if m.bias is not None:
                arrays["bias"] = (_value(m.bias), SAME)
            return Port(Layer("Bilinear", args), arrays)
        if isinstance(m, NL.NamedChain):
            ports = tuple(self.read(c, (*path, "layers", n)) for c, n in zip(m.layers, m.names))
            return Port(Layer("Chain", {}, tuple(p.layer for p in ports), m.names), children=ports)
        if isinstance(m, (NL.Parallel, NL.PairwiseFusion, NL.Maxout)):
            ports = tuple(self.read(c, (*path, "layers", i + 1)) for i, c in enumerate(m.layers))
            args = {} if isinstance(m, NL.Maxout) else {"connection": m.connection}
            names = getattr(m, "names", None)
            return Port(Layer(type(m).__name__, args, tuple(p.layer for p in ports), names), children=ports)
        if isinstance(m, NL.SkipConnection):
            inner = self.read(m.layers, (*path, "layers"))
            layer = Layer("SkipConnection", {"connection": m.connection}, (inner.layer,))
            return Port(layer, children=(inner,))
        if isinstance(m, NL.Function):
            return Port(Layer("function", {"name": m.name}))
        if isinstance(m, NL.Recurrence):
            return self.recurrence(m)
        if isinstance(m, nnx.MultiHeadAttention):
            return self.attention(m, path)
        if isinstance(m, NL.Activated):
            port = self.read(m.layer, (*path, "layer"))
            port.layer = dataclasses.replace(port.layer, args={**port.layer.args, "σ": m.activation})
            return port
        if isinstance(m, nnx.Module):
            raise UnsupportedError(
                f"no Flux layer for {type(m).__module__}.{type(m).__qualname__} (see docs/porting.md)",
                path=path,
            )
        if callable(m):
            return Port(Layer("function", {"name": name_of(m), "fn": m}))
        raise UnsupportedError(f"no Flux layer for {type(m).__name__}", path=path)

    def chain(self, items: list[Any], path: Path, keys: list[PathSegment] | None = None) -> Port:
        """A Chain of ``items``; ``keys`` are their path segments (default ``1, 2, …`` as in Flux)."""
        return chain_port(items, path, self.read, self.own_entry, keys)

    def own_entry(self, item: Any) -> bool:
        """Whether a Chain item is the author's own Function entry (never folded into the layer before)."""
        from . import _nnx_layers as NL

        return isinstance(item, NL.Function)

    def track(self, m: Any, port: Port, path: Path) -> None:
        """Follow, in call order, whether the data is conv output, so that a Linear fed by an unknown
        function of it (most likely a channels-last ``reshape``, whose order is not Flux's) is refused
        instead of ported into a model that computes something else."""
        from ._spec import CONTAINERS

        kind = port.layer.kind
        if kind in CONTAINERS:  # its children were tracked as they were read
            return
        if kind == "function" and port.layer.arg("name") in ELEMENTWISE:
            return  # an activation changes no layout
        after_unknown, self.after_unknown = self.after_unknown, False
        if kind == "Dense" and self.conv_data and after_unknown:
            raise UnsupportedError(
                "a Linear after conv layers follows an unknown function; if it flattens, use "
                f"{self.flatten_hint} so the Dense columns get Flux's order",
                path=path,
            )
        if kind in ("Conv", "CrossCor", "ConvTranspose", "DepthwiseConv"):
            self.conv_data = True
        elif kind in ("Dense", "Embedding", "Bilinear", "flatten"):
            self.conv_data = False
        elif kind == "function" and port.layer.arg("name") is None:
            self.after_unknown = True

    def linear(self, m: Any) -> Port:
        kernel = _value(m.kernel)
        inp, out = kernel.shape
        arrays: dict[str, tuple[Any, Perm]] = {"weight": (kernel, Transpose((1, 0)))}
        if m.use_bias:
            arrays["bias"] = (_value(m.bias), SAME)
        layer = Layer("Dense", {"in": int(inp), "out": int(out), "bias": bool(m.use_bias), "σ": "identity"})
        return Port(layer, arrays)

    def conv(self, m: Any, path: Path, kind: str | None = None) -> Port:
        """A Conv/CrossCor/ConvTranspose; ``kind`` given for a module that is not nnx's (linen)."""
        from flax import nnx

        from . import _nnx_layers as NL

        if kind is None:
            kind = (
                "CrossCor"
                if isinstance(m, NL.CrossCor)
                else "ConvTranspose"
                if isinstance(m, nnx.ConvTranspose)
                else "Conv"
            )
        conv = m.conv if isinstance(m, NL.CrossCor) else m
        kernel = _value(conv.kernel)
        n = kernel.ndim - 2
        args: dict[str, Any] = {
            "kernel": _rev(kernel.shape[:n]),
            "stride": _rev(_tuple(conv.strides, n)),
            "dilation": _rev(_tuple(conv.kernel_dilation, n)),
            "bias": bool(conv.use_bias),
            "σ": "identity",
        }
        if kind == "ConvTranspose":
            args.update({"in": int(kernel.shape[n]), "out": int(kernel.shape[n + 1]), "groups": 1})
            if getattr(conv, "transpose_kernel", False):
                raise UnsupportedError("ConvTranspose(transpose_kernel=True) is not ported", path=path)
            args["pad"], args["outpad"] = _transpose_pads(conv.padding, args, path)
        else:
            if _tuple(getattr(conv, "input_dilation", 1), n) != (1,) * n:
                raise UnsupportedError("Conv(input_dilation != 1) has no Flux equivalent", path=path)
            groups = int(conv.feature_group_count)
            args.update(
                {"in": int(kernel.shape[n]) * groups, "out": int(kernel.shape[n + 1]), "groups": groups}
            )
            padding = conv.padding
            if isinstance(padding, str) and padding.upper() in ("SAME", "SAME_LOWER"):
                padding = same_padding(
                    padding, kernel.shape[:n], _tuple(conv.strides, n), _tuple(conv.kernel_dilation, n), path
                )
            args["pad"] = _julia_pad(_pairs(padding, n, path))
        to_flax = Transpose((*range(n - 1, -1, -1), n, n + 1))
        if kind == "ConvTranspose":
            perm: Perm = Transpose((*range(n - 1, -1, -1), n + 1, n))
        elif kind == "CrossCor":
            perm = to_flax
        else:
            perm = Compose(to_flax, spatial_flip(n, 0))  # true convolution -> cross-correlation
        arrays: dict[str, tuple[Any, Perm]] = {"weight": (kernel, perm)}
        if conv.use_bias:
            arrays["bias"] = (_value(conv.bias), SAME)
        return Port(with_defaults(Layer(kind, args)), arrays)

    def partial_pool(self, m: Any, path: Path) -> Port:
        from flax import nnx

        kw = dict(m.keywords)
        window = tuple(kw.get("window_shape", m.args[0] if m.args else ()))
        n = len(window)
        strides = _tuple(kw.get("strides"), n)
        if m.func is nnx.avg_pool and not kw.get("count_include_pad", True):
            raise UnsupportedError(
                "avg_pool(count_include_pad=False): Flux MeanPool counts padding", path=path
            )
        pad = _julia_pad(_pairs(kw.get("padding", "VALID"), n, path))
        kind = "MaxPool" if m.func is nnx.max_pool else "MeanPool"
        return Port(Layer(kind, {"k": _rev(window), "stride": _rev(strides), "pad": pad}))

    def batchnorm(self, m: Any, path: Path) -> Port:
        mean = _value(m.mean)
        args = {
            "channels": int(mean.shape[0]),
            "ϵ": float(m.epsilon),
            "momentum": 1.0 - float(m.momentum),  # Flax keeps 1 − m (layer-spec §2.9)
            "affine": bool(m.use_scale),
            "track_stats": True,
        }
        if bool(m.use_scale) != bool(m.use_bias):
            raise UnsupportedError("Flux BatchNorm has both γ and β or neither", path=path)
        port = Port(with_defaults(Layer("BatchNorm", args)))
        if m.use_scale:
            port.arrays.update({"γ": (_value(m.scale), SAME), "β": (_value(m.bias), SAME)})
        port.arrays.update({"μ": (mean, SAME), "σ²": (_value(m.var), SAME)})
        return port

    def groupnorm(self, m: Any, path: Path, instance: bool | None = None) -> Port:
        from flax import nnx

        if instance is None:
            instance = isinstance(m, nnx.InstanceNorm)
        if bool(m.use_scale) != bool(m.use_bias):
            raise UnsupportedError("Flux norms have both γ and β or neither", path=path)
        if instance:
            channels = int(m.num_features)
        elif m.scale is not None:
            channels = int(_value(m.scale).shape[0])
        else:
            channels = int(m.num_groups) * int(m.group_size)
        args: dict[str, Any] = {"channels": channels, "ϵ": float(m.epsilon), "affine": bool(m.use_scale),
                                "track_stats": False}  # fmt: skip
        if not instance:
            args["groups"] = int(m.num_groups)
        port = Port(with_defaults(Layer("InstanceNorm" if instance else "GroupNorm", args)))
        if m.use_scale:
            port.arrays.update({"γ": (_value(m.scale), SAME), "β": (_value(m.bias), SAME)})
        return port

    def recurrence(self, m: Any) -> Port:
        """Flux's arrays as they are (the module keeps Flux's shapes and gate order)."""
        args: dict[str, Any] = {
            "in": int(_value(m.weight_ih).shape[1]),
            "out": int(_value(m.weight_hh).shape[1]),
        }
        if m.kind == "RNN":
            args["σ"] = m.activation
        arrays: dict[str, tuple[Any, Perm]] = {
            "Wi": (_value(m.weight_ih), SAME),
            "Wh": (_value(m.weight_hh), SAME),
            "b": (_value(m.bias), SAME),
        }
        if m.weight_hh_candidate is not None:
            arrays["Wh_h̃"] = (_value(m.weight_hh_candidate), SAME)
        return Port(with_defaults(Layer(m.kind, args)), arrays)

    def attention(self, m: Any, path: Path) -> Port:
        """``nnx.MultiHeadAttention``: kernels ``(in, heads, head_dim)`` are Flux's ``W.T`` with its
        rows split into contiguous head blocks (as Flux splits them), ``out`` ``(heads, head_dim,
        out)`` likewise; biases reshaped the same way."""
        if m.normalize_qk or m.num_kv_heads != m.num_heads:
            raise UnsupportedError("normalize_qk / grouped kv heads have no Flux counterpart", path=path)
        heads, dim = int(m.num_heads), int(m.head_dim)
        qk = heads * dim
        arrays: dict[str, tuple[Any, Perm]] = {}
        for name, proj in (("q_proj", m.query), ("k_proj", m.key), ("v_proj", m.value)):
            kernel = _value(proj.kernel)
            n_in = int(kernel.shape[0])
            arrays[f"{name}.weight"] = (
                kernel,
                Compose(Transpose((1, 0)), Reshape((n_in, qk), (n_in, heads, dim))),
            )
            if m.use_bias:
                arrays[f"{name}.bias"] = (_value(proj.bias), Reshape((qk,), (heads, dim)))
        out_kernel = _value(m.out.kernel)
        n_out = int(out_kernel.shape[-1])
        arrays["out_proj.weight"] = (
            out_kernel,
            Compose(Transpose((1, 0)), Reshape((qk, n_out), (heads, dim, n_out))),
        )
        if m.use_bias:
            arrays["out_proj.bias"] = (_value(m.out.bias), SAME)
        args: dict[str, Any] = {
            "q_in": int(m.in_features), "k_in": int(m.in_kv_features), "v_in": int(m.in_kv_features),
            "qk_dim": qk, "v_dim": qk, "out": n_out, "nheads": heads, "bias": bool(m.use_bias),
            "dropout_prob": float(m.dropout_rate),
        }  # fmt: skip
        return Port(with_defaults(Layer("MultiHeadAttention", args)), arrays)

    def layernorm(self, m: Any, path: Path) -> Port:
        if self.era == "0.14":
            raise UnsupportedError(layernorm_0_14_message(), path=path)
        if bool(m.use_scale) != bool(m.use_bias):
            raise UnsupportedError("Flux LayerNorm has both scale and bias or neither", path=path)
        args = {"size": (int(m.num_features),), "ϵ": math.sqrt(float(m.epsilon)), "affine": bool(m.use_scale)}
        port = Port(with_defaults(Layer("LayerNorm", args)))
        if m.use_scale:
            port.arrays.update({"scale": (_value(m.scale), SAME), "bias": (_value(m.bias), SAME)})
        return port


def _pairs(padding: Any, n: int, path: Path) -> list[tuple[int, int]]:
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return [(0, 0)] * n
        raise UnsupportedError(
            f"padding={padding!r}: Flux needs explicit padding (SamePad differs)", path=path
        )
    if isinstance(padding, int):
        return [(padding, padding)] * n
    out = []
    for p in padding:
        out.append((int(p), int(p)) if isinstance(p, int) else (int(p[0]), int(p[1])))
    return out


def _julia_pad(pairs: Any) -> tuple[int, ...]:
    out: list[int] = []
    for lo, hi in reversed(list(pairs)):
        out += [int(lo), int(hi)]
    return tuple(out)


def _transpose_pads(
    padding: Any, args: dict[str, Any], path: Path
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Inverse of :func:`transpose_padding`; a negative ``hi`` pad is read as output padding."""
    n = len(args["kernel"])
    pairs = _pairs(padding, n, path) if not isinstance(padding, str) or padding.upper() == "VALID" else None
    if pairs is None:
        raise UnsupportedError(f"ConvTranspose padding={padding!r}: give explicit pairs", path=path)
    pad: list[int] = []
    outpad: list[int] = []
    for j, (lo, hi) in zip(range(n), reversed(pairs)):
        reach = args["dilation"][j] * (args["kernel"][j] - 1)
        p_lo, p_hi = reach - lo, reach - hi
        extra = max(0, -p_hi)
        pad += [p_lo, p_hi + extra]
        outpad.append(extra)
    return tuple(pad), tuple(outpad)
