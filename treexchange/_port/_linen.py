"""The Flax linen target: a linen module plus its variables from a :class:`Layer` tree, and a
``(module, variables)`` pair read back as its Flux twin.

A linen module holds no arrays: its weights live in ``variables`` (``params``, and BatchNorm's
running statistics in ``batch_stats``), under the scope names linen gives the submodules
(``layers_0``, ``layers_1`` … for the entries of ``nn.Sequential``). So the model is always the pair
``(module, variables)``: ``tx.flux_state((module, variables))`` for Python -> Julia, and
``tx.load(path, name, like=(module, variables), layout=tx.flux_state)`` for Julia -> Python.

The array maps are the Flax nnx ones (linen and nnx store the same leaves in the same layouts:
``kernel``, ``bias``, ``scale``, ``mean``, ``var``, ``embedding``, ``query``/``key``/``value``/``out``):
the reader presents each linen layer's attributes and variables to the nnx reader's per-layer
methods (:class:`~._nnx._Reader`), so the two targets share one set of rules. Modules written with
``nn.compact`` (a ``__call__`` of the author's own) have no Flux twin and are refused by name;
compose ``nn.Sequential`` of Flax layers and the modules of :mod:`._linen_layers` instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn

from .._errors import PathSegment, TreePath, UnsupportedError
from . import _linen_layers as LL
from ._activations import function_of
from ._flaxread import FlaxLayoutReader, last_axis_hint, refuse_layernorm_on_feature_maps, scale_shape
from ._layout import (
    is_linen_model,
    julia_pad,
    layernorm_eps,
    python_padding,
    rev,
    transpose_padding,
)
from ._perm import SAME, Transpose
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
from ._state import Port, bare_cell

__all__ = ["build_linen", "is_linen_model", "read_linen"]

Vars = dict[str, Any]


# === building ======================================================================================


def build_linen(layer: Layer, *, flux: str = DEFAULT_FLUX_ERA) -> tuple[Any, dict[str, Any]]:
    """A Flax linen module for a Flux layer tree, with its variables' shapes (no weights drawn).

    Returns ``(module, variables)`` where every array of ``variables`` is a
    ``jax.ShapeDtypeStruct`` (float32): restore a state into the pair
    (``tx.load(path, name, like=(module, variables), layout=tx.flux_state)``), or use
    :func:`treexchange.from_flux` with ``target="linen"``, which does both.

    Example:
        >>> import jax
        >>> conv = Layer("Conv", {"kernel": (3, 3), "in": 1, "out": 2, "σ": "relu"})
        >>> module, variables = build_linen(Layer("Chain", children=(conv,)))
        >>> jax.tree_util.tree_map(lambda s: s.shape, variables)
        {'params': {'layers_0': {'bias': (2,), 'kernel': (3, 3, 1, 2)}}}
    """
    module, params, stats = _one(with_defaults(layer), flux)
    variables: dict[str, Any] = {}  # as module.init gives them: no empty collections
    if params:
        variables["params"] = params
    if stats:
        variables["batch_stats"] = stats
    return module, variables


@dataclasses.dataclass
class _Built:
    module: Any  # a linen module or, in a Chain, a JAX function
    params: Vars = dataclasses.field(default_factory=dict)
    stats: Vars = dataclasses.field(default_factory=dict)


def _shape(*shape: int) -> Any:
    return jax.ShapeDtypeStruct(tuple(int(n) for n in shape), jnp.float32)


def _build(layer: Layer, era: str) -> list[_Built]:
    built: _Built = builder("linen", layer.kind)(layer, era)
    act = layer.arg("σ", "identity")
    if layer.kind in ACTIVATED and act != "identity":
        return [built, _Built(function_of(act))]
    return [built]


def _one(layer: Layer, era: str) -> tuple[Any, Vars, Vars]:

    built = _build(layer, era)
    if len(built) == 1:
        return built[0].module, built[0].params, built[0].stats
    inner = built[0]
    return (
        LL.Activated(inner.module, str(layer.args["σ"])),
        _scoped({"layer": inner.params}),
        _scoped({"layer": inner.stats}),
    )


def _scoped(children: Mapping[str, Vars]) -> Vars:
    """Variables of a container: each child's under its scope name, empty scopes left out (as linen)."""
    return {name: sub for name, sub in children.items() if sub}


def _container(children: list[tuple[Any, Vars, Vars]]) -> tuple[list[Any], Vars, Vars]:
    modules = [m for m, _, _ in children]
    params = _scoped({f"layers_{i}": p for i, (_, p, _) in enumerate(children)})
    stats = _scoped({f"layers_{i}": s for i, (_, _, s) in enumerate(children)})
    return modules, params, stats


def _build_chain(layer: Layer, era: str) -> _Built:
    refuse_layernorm_on_feature_maps(layer, "linen")
    if layer.names:
        modules, params, stats = _container([_one(c, era) for c in layer.children])
        return _Built(LL.NamedChain(modules, tuple(layer.names)), params, stats)
    flat = [b for child in layer.children for b in _build(child, era)]
    modules, params, stats = _container([(b.module, b.params, b.stats) for b in flat])
    return _Built(nn.Sequential(modules), params, stats)


def _build_dense(layer: Layer, era: str) -> _Built:

    a = layer.args
    params = {"kernel": _shape(a["in"], a["out"])}
    if a["bias"]:
        params["bias"] = _shape(a["out"])
    return _Built(nn.Dense(a["out"], use_bias=a["bias"]), params)


def _build_conv(layer: Layer, era: str) -> _Built:
    a = layer.args
    kernel = rev(a["kernel"])
    common: dict[str, Any] = dict(
        kernel_size=kernel, strides=rev(a["stride"]), kernel_dilation=rev(a["dilation"]), use_bias=a["bias"]
    )
    params = {"bias": _shape(a["out"])} if a["bias"] else {}
    if layer.kind == "ConvTranspose":
        if a["groups"] != 1:
            raise UnsupportedError("Flax linen ConvTranspose has no groups (feature_group_count)")
        params["kernel"] = _shape(*kernel, a["in"], a["out"])
        module = nn.ConvTranspose(a["out"], padding=transpose_padding(a), transpose_kernel=False, **common)
        return _Built(module, params)
    groups = a["in"] if layer.kind == "DepthwiseConv" else a["groups"]
    params["kernel"] = _shape(*kernel, a["in"] // groups, a["out"])
    cls = LL.CrossCor if layer.kind == "CrossCor" else nn.Conv
    return _Built(
        cls(a["out"], padding=python_padding(a["pad"]), feature_group_count=groups, **common), params
    )


def _build_pool(layer: Layer, era: str) -> _Built:

    a = layer.args
    cls = LL.MaxPool if layer.kind == "MaxPool" else LL.MeanPool
    return _Built(cls(rev(a["k"]), rev(a["stride"]), tuple(python_padding(a["pad"]))))


def _affine(a: Mapping[str, Any], size: int) -> Vars:
    return {"scale": _shape(size), "bias": _shape(size)} if a["affine"] else {}


def _build_norm(layer: Layer, era: str) -> _Built:
    a = layer.args
    affine = dict(use_bias=a["affine"], use_scale=a["affine"])
    channels = int(a["channels"])
    if layer.kind == "BatchNorm":
        if not a["track_stats"]:
            raise UnsupportedError("BatchNorm(track_stats=false) has no Flax equivalent in inference mode")
        batchnorm = nn.BatchNorm(
            use_running_average=True,
            momentum=1.0 - float(a["momentum"]),  # Flux: new = (1-m)·old + m·batch; Flax: the reverse
            epsilon=float(a["ϵ"]),
            **affine,
        )
        return _Built(batchnorm, _affine(a, channels), {"mean": _shape(channels), "var": _shape(channels)})
    if a["track_stats"]:
        raise UnsupportedError(f"{layer.kind}(track_stats=true): Flax keeps no running statistics for it")
    if layer.kind == "InstanceNorm":
        return _Built(
            LL.InstanceNorm(epsilon=float(a["ϵ"]), features=channels, **affine), _affine(a, channels)
        )
    module = LL.GroupNorm(num_groups=a["groups"], epsilon=float(a["ϵ"]), features=channels, **affine)
    return _Built(module, _affine(a, channels))


def _build_layernorm(layer: Layer, era: str) -> _Built:

    a = layer.args
    if len(a["size"]) != 1:
        raise UnsupportedError("Flax linen LayerNorm over more than one dim is not ported yet; use Equinox")
    eps = layernorm_eps(a["ϵ"], era)
    module = LL.LayerNorm(epsilon=eps, use_bias=a["affine"], use_scale=a["affine"], features=a["size"][0])
    return _Built(module, _affine(a, a["size"][0]))


def _build_other(layer: Layer, era: str) -> _Built:
    a = layer.args
    kind = layer.kind
    if kind in ("AdaptiveMaxPool", "AdaptiveMeanPool"):
        return _Built(LL.AdaptivePool("max" if kind == "AdaptiveMaxPool" else "mean", rev(a["out"])))
    if kind in ("GlobalMaxPool", "GlobalMeanPool"):
        return _Built(LL.GlobalPool("max" if kind == "GlobalMaxPool" else "mean"))
    if kind == "flatten":
        return _Built(LL.Flatten())
    if kind == "function":
        function_of(str(a["name"]))  # an unknown name fails here, at build time
        return _Built(LL.Function(str(a["name"])))  # linen reserves the field `name`
    if kind == "Embedding":
        return _Built(nn.Embed(a["in"], a["out"]), {"embedding": _shape(a["in"], a["out"])})
    if kind == "Dropout":
        return _Built(nn.Dropout(float(a["p"]), deterministic=True))
    if kind == "AlphaDropout":
        return _Built(LL.AlphaDropout(float(a["p"])))
    if kind == "Bilinear":
        params = {"weight": _shape(a["out"], *a["in"])}
        if a["bias"]:
            params["bias"] = _shape(a["out"])
        return _Built(LL.Bilinear(a["out"], str(a["σ"]), bool(a["bias"])), params)
    if kind == "SkipConnection":
        inner, params, stats = _one(layer.children[0], era)
        return _Built(
            LL.SkipConnection(inner, a.get("connection", "+")),
            _scoped({"layers": params}),
            _scoped({"layers": stats}),
        )
    modules, params, stats = _container([_one(c, era) for c in layer.children])
    if kind == "Parallel":
        return _Built(LL.Parallel(modules, a.get("connection", "+"), layer.names), params, stats)
    if kind == "PairwiseFusion":
        return _Built(LL.PairwiseFusion(modules, a.get("connection", "+")), params, stats)
    if kind == "Maxout":
        return _Built(LL.Maxout(modules), params, stats)
    raise UnsupportedError(f"no Flax linen builder for the Flux layer {kind!r} yet")  # pragma: no cover


def _build_scale(layer: Layer, era: str) -> _Built:
    shape = scale_shape(layer.args["size"])
    params = {"weight": _shape(*shape), **({"bias": _shape(*shape)} if layer.args["bias"] else {})}
    return _Built(LL.Scale(shape, bool(layer.args["bias"])), params)


def _build_recurrent(layer: Layer, era: str) -> _Built:
    """Flux's RNN/LSTM/GRU/GRUv3 as :class:`~._linen_layers.Recurrence`, a bare cell (``GRUCell``)
    as :class:`~._linen_layers.Cell`."""
    kind, n_in, hidden = wrapped_kind(layer.kind), int(layer.args["in"]), int(layer.args["out"])
    gates = RECURRENT_GATES[kind]
    params = {
        "weight_ih": _shape(gates * hidden, n_in),
        "weight_hh": _shape((2 if kind == "GRUv3" else gates) * hidden, hidden),
    }
    use_bias = bool(layer.arg("bias", True))  # (Flux ≥ 0.15: bias=false)
    if use_bias:
        params["bias"] = _shape(gates * hidden)
    if kind == "GRUv3":
        params["weight_hh_candidate"] = _shape(hidden, hidden)
    learnt = 0  # a Flux ≤ 0.14 learnt initial state: h, and c for LSTM
    if layer.args.get("state0"):
        learnt = 2 if kind == "LSTM" else 1
        params["state0_h"] = _shape(hidden)
        if learnt == 2:
            params["state0_c"] = _shape(hidden)
    activation = str(layer.args.get("σ", "tanh"))
    if layer.kind in CELLS:
        return _Built(LL.Cell(kind, hidden, activation, use_bias), params)
    returning = bool(layer.arg("return_state", False))
    module = LL.Recurrence(kind, hidden, activation, learnt, use_bias, returning)
    return _Built(module, params)


def _build_attention(layer: Layer, era: str) -> _Built:
    """Flux's MultiHeadAttention as ``nn.MultiHeadDotProductAttention``: one size for q, k and v
    (``qk_dim == v_dim``); keys and values may come in with different sizes."""

    a = layer.args
    if a["qk_dim"] != a["v_dim"]:
        raise UnsupportedError(
            f"nn.MultiHeadDotProductAttention needs qk_dim == v_dim; this Flux layer has {a['qk_dim']} and "
            f"{a['v_dim']} (target='equinox' ports it)"
        )
    heads = int(a["nheads"])
    dim = int(a["qk_dim"]) // heads
    params: Vars = {}
    for name, n_in in (("query", a["q_in"]), ("key", a["k_in"]), ("value", a["v_in"])):
        params[name] = {"kernel": _shape(n_in, heads, dim)}
        if a["bias"]:
            params[name]["bias"] = _shape(heads, dim)
    params["out"] = {"kernel": _shape(heads, dim, a["out"])}
    if a["bias"]:
        params["out"]["bias"] = _shape(a["out"])
    module = nn.MultiHeadDotProductAttention(
        num_heads=heads,
        qkv_features=int(a["qk_dim"]),
        out_features=int(a["out"]),
        use_bias=bool(a["bias"]),
        dropout_rate=float(a["dropout_prob"]),
        deterministic=True,
    )
    return _Built(module, params)


# === reading =======================================================================================


def read_linen(module: Any, variables: Mapping[str, Any], *, flux: str = DEFAULT_FLUX_ERA) -> Port:
    """A Flax linen module and its variables read as their Flux twin.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import linen as nn
        >>> mlp = nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(2)])
        >>> variables = mlp.init(jax.random.key(0), jnp.ones((1, 3)))
        >>> port = read_linen(mlp, variables)
        >>> [(c.kind, c.args["in"], c.args["out"], c.args["σ"]) for c in port.layer.children]
        [('Dense', 3, 4, 'relu'), ('Dense', 4, 2, 'identity')]
    """
    params = variables.get("params", {})
    stats = variables.get("batch_stats", {})
    port = _LinenReader(flux).read(_Scoped(module, params, stats), ())
    refuse_layernorm_on_feature_maps(port.layer, "linen", reading=True)
    return port


@dataclasses.dataclass
class _Scoped:
    """A linen module with the variables of its scope (``params`` and ``batch_stats`` subtrees)."""

    module: Any
    params: Mapping[str, Any]
    stats: Mapping[str, Any]

    def child(self, item: Any, scope: str) -> Any:
        """A child entry: a module with its scope's variables, or a plain function as it is."""

        if not isinstance(item, nn.Module):
            return item
        return _Scoped(item, self.params.get(scope, {}), self.stats.get(scope, {}))

    def param(self, name: str, path: TreePath) -> Any:
        if name not in self.params:
            raise UnsupportedError(
                f"{type(self.module).__name__} has no variable {name!r} here: pass the variables "
                "that module.init (or a restore) gave for this module",
                path=path,
            )
        return self.params[name]

    def stat(self, name: str, path: TreePath) -> Any:
        if name not in self.stats:
            raise UnsupportedError(
                f"{type(self.module).__name__} has no batch_stats {name!r}: pass the whole variables, "
                "batch_stats included",
                path=path,
            )
        return self.stats[name]


def _view(**attrs: Any) -> SimpleNamespace:
    """A linen layer presented with the attribute names of its nnx twin (the nnx reader reads it)."""
    return SimpleNamespace(**attrs)


class _LinenReader(FlaxLayoutReader):
    max_pool = staticmethod(nn.max_pool)
    avg_pool = staticmethod(nn.avg_pool)
    flatten_hint = "treexchange._port._linen_layers.Flatten"

    def own_entry(self, item: Any) -> bool:

        return isinstance(item, _Scoped) and isinstance(item.module, LL.Function)

    def read(self, m: Any, path: TreePath) -> Port:
        if isinstance(m, _Scoped):
            port = self.linen(m, path)
        else:  # a function in a Sequential (nn.relu, a partial pool)
            port = self.function(m, path)
        self.track(m, port, path)
        return port

    def linen(self, s: _Scoped, path: TreePath) -> Port:
        """The module of ``s`` as its Flux layer, by the reader registered for its class (the nearest
        in its MRO, see ``_READERS``)."""
        m = s.module
        reader = class_reader(_BY_CLASS, m)
        if reader is not None:
            return reader(self, s, path)
        raise UnsupportedError(
            f"no Flux layer for {type(m).__module__}.{type(m).__qualname__}: a module with a __call__ of "
            "its own has no Flux twin; compose nn.Sequential of Flax layers and the modules of "
            "treexchange._port._linen_layers (see docs/porting.md)",
            path=path,
        )

    # --- one reader per module class (registered in _READERS) ----------------------------------------
    def sequential(self, s: _Scoped, path: TreePath) -> Port:
        keys: list[PathSegment] = [f"layers_{i}" for i in range(len(s.module.layers))]
        return self.chain([s.child(item, str(k)) for item, k in zip(s.module.layers, keys)], path, keys)

    def dense(self, s: _Scoped, path: TreePath) -> Port:
        m = s.module
        kernel = s.param("kernel", path)
        bias = s.param("bias", path) if m.use_bias else None
        return self.linear(_view(kernel=kernel, bias=bias, use_bias=m.use_bias))

    def pool_module(self, s: _Scoped, path: TreePath) -> Port:
        m = s.module
        kind = "MeanPool" if isinstance(m, LL.MeanPool) else "MaxPool"
        return Port(Layer(kind, {"k": rev(m.window), "stride": rev(m.strides), "pad": julia_pad(m.padding)}))

    def adaptive(self, s: _Scoped, path: TreePath) -> Port:
        m = s.module
        return Port(Layer("AdaptiveMaxPool" if m.op == "max" else "AdaptiveMeanPool", {"out": rev(m.out)}))

    def global_pool(self, s: _Scoped, path: TreePath) -> Port:
        return Port(Layer("GlobalMaxPool" if s.module.op == "max" else "GlobalMeanPool"))

    def flatten(self, s: _Scoped, path: TreePath) -> Port:
        return Port(Layer("flatten"))

    def function_entry(self, s: _Scoped, path: TreePath) -> Port:
        return Port(Layer("function", {"name": s.module.function}))

    def dropout(self, s: _Scoped, path: TreePath) -> Port:
        m = s.module
        if isinstance(m, LL.AlphaDropout):
            return Port(Layer("AlphaDropout", {"p": float(m.p)}))
        return Port(Layer("Dropout", {"p": float(m.rate)}))

    def embedding(self, s: _Scoped, path: TreePath) -> Port:
        table = s.param("embedding", path)
        layer = Layer("Embedding", {"in": int(table.shape[0]), "out": int(table.shape[1])})
        return Port(layer, {"weight": (table, Transpose((1, 0)))})

    def scale_module(self, s: _Scoped, path: TreePath) -> Port:
        return self.scale(s.param("weight", path), s.param("bias", path) if s.module.use_bias else None)

    def bilinear(self, s: _Scoped, path: TreePath) -> Port:
        m = s.module
        weight = s.param("weight", path)
        out, in1, in2 = weight.shape
        args: dict[str, Any] = {
            "in": (int(in1), int(in2)),
            "out": int(out),
            "σ": m.activation,
            "bias": m.use_bias,
        }
        arrays: dict[str, Any] = {"weight": (weight, SAME)}
        if m.use_bias:
            arrays["bias"] = (s.param("bias", path), SAME)
        return Port(Layer("Bilinear", args), arrays)

    def connected(self, s: _Scoped, path: TreePath) -> Port:
        """A named Chain, ``Parallel``, ``PairwiseFusion`` or ``Maxout``: the layers (scopes
        ``layers_0``, …), and the connection if any."""
        m = s.module
        ports = tuple(
            self.read(s.child(item, f"layers_{i}"), (*path, f"layers_{i}")) for i, item in enumerate(m.layers)
        )
        kind = "Chain" if isinstance(m, LL.NamedChain) else type(m).__name__
        args = {} if isinstance(m, (LL.NamedChain, LL.Maxout)) else {"connection": m.connection}
        names: tuple[str, ...] | None = getattr(m, "names", None)
        return Port(Layer(kind, args, tuple(p.layer for p in ports), names), children=ports)

    def skip(self, s: _Scoped, path: TreePath) -> Port:
        inner = self.read(s.child(s.module.layers, "layers"), (*path, "layers"))
        return Port(
            Layer("SkipConnection", {"connection": s.module.connection}, (inner.layer,)), children=(inner,)
        )

    def recurrence_module(self, s: _Scoped, path: TreePath) -> Port:
        m = s.module
        names = ("weight_ih", "weight_hh", "bias") if m.use_bias else ("weight_ih", "weight_hh")
        arrays = {n: s.param(n, path) for n in names}
        arrays.setdefault("bias", None)
        candidate = s.param("weight_hh_candidate", path) if m.kind == "GRUv3" else None
        learnt = m.learnt_state0
        h0 = s.param("state0_h", path) if learnt else None
        c0 = s.param("state0_c", path) if learnt == 2 else None
        view = _view(
            kind=m.kind,
            activation=m.activation,
            weight_hh_candidate=candidate,
            state0_h=h0,
            state0_c=c0,
            return_state=m.return_state,
            **arrays,
        )
        return self.recurrence(view)

    def cell_module(self, s: _Scoped, path: TreePath) -> Port:
        return bare_cell(self.recurrence_module(s, path))

    def activated(self, s: _Scoped, path: TreePath) -> Port:
        m = s.module
        port = self.read(s.child(m.layer, "layer"), (*path, "layer"))
        port.layer = dataclasses.replace(port.layer, args={**port.layer.args, "σ": m.activation})
        return port

    def conv_module(self, s: _Scoped, path: TreePath) -> Port:
        m = s.module
        transpose = isinstance(m, nn.ConvTranspose)
        kind = "ConvTranspose" if transpose else "CrossCor" if isinstance(m, LL.CrossCor) else "Conv"
        if not transpose and m.input_dilation not in (None, 1) and set(m.input_dilation) != {1}:
            raise UnsupportedError("Conv(input_dilation != 1) has no Flux equivalent", path=path)
        view = _view(
            kernel=s.param("kernel", path),
            bias=s.param("bias", path) if m.use_bias else None,
            use_bias=m.use_bias,
            strides=m.strides,
            padding=m.padding,
            kernel_dilation=m.kernel_dilation,
            feature_group_count=1 if transpose else m.feature_group_count,
            transpose_kernel=bool(getattr(m, "transpose_kernel", False)),
            mask=getattr(m, "mask", None),
        )
        return self.conv(view, path, kind)

    def norm(self, s: _Scoped, path: TreePath) -> Port:

        m = s.module
        if isinstance(m, nn.LayerNorm) and (m.reduction_axes != -1 or m.feature_axes != -1):
            hint = last_axis_hint(m.reduction_axes if m.reduction_axes != -1 else m.feature_axes)
            message = f"LayerNorm over other axes than the last has no Flux twin{hint}"
            raise UnsupportedError(message, path=path)
        if isinstance(m, nn.BatchNorm) and m.axis != -1:
            hint = last_axis_hint(m.axis)
            message = f"BatchNorm(axis={m.axis!r}): Flux normalises the channels{hint}"
            raise UnsupportedError(message, path=path)
        scale = s.param("scale", path) if m.use_scale else None
        bias = s.param("bias", path) if m.use_bias else None
        common = dict(epsilon=m.epsilon, use_scale=m.use_scale, use_bias=m.use_bias, scale=scale, bias=bias)
        if isinstance(m, nn.BatchNorm):
            mean, var = s.stat("mean", path), s.stat("var", path)
            return self.batchnorm(_view(mean=mean, var=var, momentum=m.momentum, **common), path)
        size: int | None = next(
            (int(a.shape[0]) for a in (scale, bias) if a is not None), getattr(m, "features", None)
        )
        if isinstance(m, nn.GroupNorm):
            num_groups: int | None = m.num_groups
            group_size: int | None = m.group_size
            if size is None and num_groups is not None and group_size is not None:
                size = num_groups * group_size
            if size is None:
                raise UnsupportedError(
                    "GroupNorm without scale or bias: its channel count is unknown "
                    "(treexchange._port._linen_layers.GroupNorm(features=…) knows it)",
                    path=path,
                )
            channels = size
            groups = num_groups if num_groups is not None else channels // int(group_size or 1)
            view = _view(num_groups=groups, group_size=channels // groups, **common)
            return self.groupnorm(view, path, instance=False)
        if size is None:
            raise UnsupportedError(
                f"{type(m).__name__} without scale or bias: its feature count is unknown (Flux needs it)",
                path=path,
            )
        view = _view(num_features=size, **common)
        if isinstance(m, nn.InstanceNorm):
            return self.groupnorm(view, path, instance=True)
        return self.layernorm(view, path)

    def attention_module(self, s: _Scoped, path: TreePath) -> Port:

        m = s.module
        if m.attention_fn is not nn.dot_product_attention:
            raise UnsupportedError("a custom attention_fn has no Flux counterpart", path=path)
        projections = {}
        for name in ("query", "key", "value", "out"):
            sub = s.params.get(name, {})
            if "kernel" not in sub:
                raise UnsupportedError(f"MultiHeadDotProductAttention has no {name} kernel here", path=path)
            projections[name] = _view(kernel=sub["kernel"], bias=sub.get("bias"))
        query = projections["query"].kernel
        view = _view(
            normalize_qk=m.normalize_qk,
            num_heads=m.num_heads,
            num_kv_heads=m.num_heads,
            head_dim=int(query.shape[2]),
            use_bias=m.use_bias,
            in_features=int(query.shape[0]),
            in_kv_features=int(projections["key"].kernel.shape[0]),
            dropout_rate=m.dropout_rate,
            **projections,
        )
        port = self.attention(view, path)
        v_in = int(projections["value"].kernel.shape[0])  # linen keys and values have sizes of their own
        port.layer = dataclasses.replace(port.layer, args={**port.layer.args, "v_in": v_in})
        return port


# === the registry entries: one builder and one reader per kind ======================================

_BUILDERS: list[tuple[tuple[str, ...], Callable[..., Any]]] = [
    (("Chain",), _build_chain),
    (("Parallel", "SkipConnection", "PairwiseFusion", "Maxout"), _build_other),
    (("Dense",), _build_dense),
    (("Bilinear", "Embedding"), _build_other),
    (("Scale",), _build_scale),
    (("Conv", "DepthwiseConv", "CrossCor", "ConvTranspose"), _build_conv),
    (("MaxPool", "MeanPool"), _build_pool),
    (("AdaptiveMaxPool", "AdaptiveMeanPool", "GlobalMaxPool", "GlobalMeanPool", "flatten"), _build_other),
    (("function",), _build_other),
    (("Dropout", "AlphaDropout"), _build_other),
    (("BatchNorm", "GroupNorm", "InstanceNorm"), _build_norm),
    (("LayerNorm",), _build_layernorm),
    (("MultiHeadAttention",), _build_attention),
    (("RNN", "LSTM", "GRU", "GRUv3", *CELLS), _build_recurrent),
]
_READERS: ClassReaders = [
    (("Chain",), (nn.Sequential,), _LinenReader.sequential),
    (("Parallel", "PairwiseFusion", "Maxout"), (LL.NamedChain, LL.Parallel, LL.PairwiseFusion, LL.Maxout),
     _LinenReader.connected),
    (("SkipConnection",), (LL.SkipConnection,), _LinenReader.skip),
    ((), (LL.Activated,), _LinenReader.activated),
    (("function",), (LL.Function,), _LinenReader.function_entry),
    (("Dense",), (nn.Dense,), _LinenReader.dense),
    (("Bilinear",), (LL.Bilinear,), _LinenReader.bilinear),
    (("Embedding",), (nn.Embed,), _LinenReader.embedding),
    (("Scale",), (LL.Scale,), _LinenReader.scale_module),
    (("Conv", "DepthwiseConv", "CrossCor", "ConvTranspose"), (nn.Conv, nn.ConvTranspose),
     _LinenReader.conv_module),
    (("MaxPool", "MeanPool"), (LL.MaxPool,), _LinenReader.pool_module),  # MeanPool is a MaxPool subclass
    (("AdaptiveMaxPool", "AdaptiveMeanPool"), (LL.AdaptivePool,), _LinenReader.adaptive),
    (("GlobalMaxPool", "GlobalMeanPool"), (LL.GlobalPool,), _LinenReader.global_pool),
    (("flatten",), (LL.Flatten,), _LinenReader.flatten),
    (("Dropout", "AlphaDropout"), (nn.Dropout, LL.AlphaDropout), _LinenReader.dropout),
    (("BatchNorm", "GroupNorm", "InstanceNorm", "LayerNorm"),
     (nn.BatchNorm, nn.GroupNorm, nn.InstanceNorm, nn.LayerNorm), _LinenReader.norm),
    (("MultiHeadAttention",), (nn.MultiHeadDotProductAttention,), _LinenReader.attention_module),
    (("RNN", "LSTM", "GRU", "GRUv3"), (LL.Recurrence,), _LinenReader.recurrence_module),
    (tuple(CELLS), (LL.Cell,), _LinenReader.cell_module),
]  # fmt: skip
_BY_CLASS = register_target("linen", _BUILDERS, _READERS)
