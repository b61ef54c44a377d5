"""The Equinox target: a runnable Equinox model from a :class:`Layer` tree, and an Equinox model
read back as its Flux twin (a :class:`~treexchange._port._state.Port` tree).

Built models take ONE sample, channels first (docs/porting.md §Data layout: ``x_py = rev(x_jl)``
without the batch axis); ``jax.vmap`` them for a batch. A Flux layer with an activation becomes the
Equinox layer followed by ``eqx.nn.Lambda(σ)`` in the enclosing ``eqx.nn.Sequential``; reading folds
such a Lambda back into the layer, as one writes ``Conv(…, relu)`` in Flux.

Per-layer array maps (Julia array -> Equinox leaf, exact, see ``_perm``; docs/porting.md §Supported layers):

=================  ===============================================================================
Dense              ``weight`` same, ``bias`` same
Conv/Depthwise     ``weight = flip_sp(rev(W))`` (Flux convolves, JAX cross-correlates), ``bias (C,1…)``
CrossCor           ``weight = rev(W)`` (no flip)
ConvTranspose      ``rev(W)`` regrouped to ``(Cout, Cin÷G, k…)``, **no flip** (§2.8)
Embedding          ``weight = W.T``
BatchNorm          ``weight = γ``, ``bias = β``; μ, σ² in ``eqx.nn.State``; ``momentum = 1 − m``
LayerNorm          ``weight``, ``bias`` = ``rev(scale)``, ``rev(bias)``
GroupNorm          ``weight = γ``, ``bias = β``; InstanceNorm = GroupNorm(groups = C)
=================  ===============================================================================
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._bridge._restore import LeafRef
from .._errors import TreePath, UnsupportedError
from . import _eqx_layers as L
from ._activations import function_of, name_of
from ._jaxops import learnt_initial_state
from ._layout import (
    chain_port,
    julia_pad,
    layernorm_0_14_message,
    layernorm_0_15_message,
    layernorm_eps,
    python_padding,
    rev,
    same_padding,
)
from ._perm import REV, SAME, Perm, Reshape, Transpose, conv_weight_perm
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
from ._state import KEEP, Port, bare_cell, carry_initial_state, returning_state

# === building ======================================================================================


def build_equinox(layer: Layer, *, key: Any, flux: str = DEFAULT_FLUX_ERA) -> Any:
    """A runnable Equinox model for a Flux layer tree (weights random; restore a state into it).

    A model with BatchNorm needs its state: ``state = eqx.nn.State(model)``, call
    ``model(x, state)``; layers are in inference mode (running statistics used).

    Example:
        >>> import jax
        >>> from treexchange._port._spec import Layer
        >>> net = Layer("Chain", children=(Layer("Dense", {"in": 3, "out": 2, "σ": "relu"}),))
        >>> model = build_equinox(net, key=jax.random.key(0))
        >>> type(model).__name__, model(jax.numpy.ones(3)).shape
        ('Sequential', (2,))
    """

    return _one(with_defaults(layer), key, flux)


def _one(layer: Layer, key: Any, era: str) -> Any:
    """One module for ``layer``; with an activation: ``Activated(module, σ)``, or for a stateful
    layer (BatchNorm, whose state must be passed through) ``StatefulActivated(module, σ)``; both
    read back as that one layer (a Sequential would read back as a Chain of one)."""
    modules = _build(layer, key, era)
    if len(modules) == 1:
        return modules[0]
    if isinstance(modules[0], eqx.nn.StatefulLayer):
        return L.StatefulActivated(modules[0], str(layer.args["σ"]))
    return L.Activated(modules[0], str(layer.args["σ"]))


def _build(layer: Layer, key: Any, era: str) -> list[Any]:
    """The Equinox module for ``layer``, followed by its activation Lambda when it has one."""
    module = builder("equinox", layer.kind)(layer, key, era)
    act = layer.arg("σ", "identity")
    if layer.kind in ACTIVATED and act != "identity":
        return [module, eqx.nn.Lambda(function_of(act))]
    return [module]


def _keys(key: Any, n: int) -> list[Any]:
    return list(jax.random.split(key, max(n, 1)))


def _children(layer: Layer, key: Any, era: str) -> list[Any]:
    return [_one(child, k, era) for child, k in zip(layer.children, _keys(key, len(layer.children)))]


def _same(m: Any, transpose: bool, path: TreePath) -> Any:
    """An Equinox conv's padding, with ``"VALID"`` (zeros, for a Conv and a ConvTranspose alike: the
    latter's padding is that of its equivalent Conv, as Flux's) and ``"SAME"`` of a stride-1 conv
    made explicit (``same_padding``)."""
    padding = m.padding
    if isinstance(padding, str) and padding.upper() == "VALID":
        return [(0, 0)] * int(m.num_spatial_dims)
    if isinstance(padding, str) and padding.upper() in ("SAME", "SAME_LOWER") and not transpose:
        return same_padding(padding, m.kernel_size, m.stride, m.dilation, path)
    return padding


def _build_chain(layer: Layer, key: Any, era: str) -> Any:
    if layer.names:
        return L.NamedChain(tuple(_children(layer, key, era)), tuple(layer.names))
    flat: list[Any] = []
    for child, k in zip(layer.children, _keys(key, len(layer.children))):
        flat += _build(child, k, era)
    # (a recurrent layer's sequence, or a LayerNorm over the last dims of a larger input: Flux
    # normalises its first dims, the last here, of whatever comes in)
    if any(sub.kind in RECURRENT_GATES or sub.kind == "LayerNorm" for sub in layer.walk()):
        return L.SequenceChain(tuple(flat))
    return eqx.nn.Sequential(flat)


def _build_dense(layer: Layer, key: Any, era: str) -> Any:
    a = layer.args
    return eqx.nn.Linear(a["in"], a["out"], use_bias=a["bias"], key=key)


def _build_conv(layer: Layer, key: Any, era: str) -> Any:
    a = layer.args
    n = len(a["kernel"])
    groups = a["in"] if layer.kind == "DepthwiseConv" else a["groups"]
    common = dict(
        num_spatial_dims=n,
        in_channels=a["in"],
        out_channels=a["out"],
        kernel_size=rev(a["kernel"]),
        stride=rev(a["stride"]),
        padding=python_padding(a["pad"]),
        dilation=rev(a["dilation"]),
        use_bias=a["bias"],
        key=key,
    )
    if layer.kind == "ConvTranspose":
        if any(o >= s for o, s in zip(a["outpad"], a["stride"])):  # (Flux allows it, Equinox not)
            raise UnsupportedError(
                f"ConvTranspose(outpad={tuple(a['outpad'])}, stride={tuple(a['stride'])}): Equinox needs "
                "each output padding below its stride (target='nnx' or 'linen' ports it)"
            )
        return eqx.nn.ConvTranspose(output_padding=rev(a["outpad"]), groups=groups, **common)
    if layer.kind == "CrossCor":
        return L.CrossCor(eqx.nn.Conv(**common))
    return eqx.nn.Conv(groups=groups, **common)


def _build_pool(layer: Layer, key: Any, era: str) -> Any:
    a = layer.args
    n = len(a["k"])
    nn = eqx.nn
    cls = {
        ("MaxPool", 1): nn.MaxPool1d, ("MaxPool", 2): nn.MaxPool2d, ("MaxPool", 3): nn.MaxPool3d,
        ("MeanPool", 1): nn.AvgPool1d, ("MeanPool", 2): nn.AvgPool2d, ("MeanPool", 3): nn.AvgPool3d,
    }[(layer.kind, n)]  # fmt: skip
    # Stride passed explicitly: Equinox's default is 1, Flux's is the window (docs/porting.md §Pools).
    return cls(kernel_size=rev(a["k"]), stride=rev(a["stride"]), padding=python_padding(a["pad"]))


def _build_norm(layer: Layer, key: Any, era: str) -> Any:
    a = layer.args
    if layer.kind == "BatchNorm":
        if not a["track_stats"]:
            raise UnsupportedError("BatchNorm(track_stats=false) has no Equinox equivalent in inference mode")
        return eqx.nn.BatchNorm(
            a["channels"],
            axis_name="batch",
            eps=float(a["ϵ"]),
            channelwise_affine=a["affine"],
            momentum=1.0 - float(a["momentum"]),  # Flux: new = (1-m)·old + m·batch; Equinox: the reverse
            inference=True,
            mode="ema",
        )
    if a["track_stats"]:
        raise UnsupportedError(
            f"{layer.kind}(track_stats=true): Equinox GroupNorm keeps no running statistics"
        )
    groups = a["channels"] if layer.kind == "InstanceNorm" else a["groups"]
    norm = eqx.nn.GroupNorm(groups, a["channels"], eps=float(a["ϵ"]), channelwise_affine=a["affine"])
    return L.InstanceNorm(norm) if layer.kind == "InstanceNorm" else norm


def _build_layernorm(layer: Layer, key: Any, era: str) -> Any:
    a = layer.args
    if era == "0.14":
        shape = rev(a["size"])
        weight, bias = (jnp.ones(shape), jnp.zeros(shape)) if a["affine"] else (None, None)
        return L.LayerNormStdEps(weight, bias, shape, float(a["ϵ"]))
    return eqx.nn.LayerNorm(
        rev(a["size"]), eps=layernorm_eps(a["ϵ"], era), use_weight=a["affine"], use_bias=a["affine"]
    )


def _build_scale(layer: Layer, key: Any, era: str) -> Any:
    shape = rev(layer.args["size"])  # Flux's init: scale ones, bias zeros
    return L.Scale(jnp.ones(shape), jnp.zeros(shape) if layer.args["bias"] else None)


def _build_embedding(layer: Layer, key: Any, era: str) -> Any:
    return eqx.nn.Embedding(layer.args["in"], layer.args["out"], key=key)


def _build_bilinear(layer: Layer, key: Any, era: str) -> Any:
    a = layer.args
    in1, in2 = a["in"]
    bound = 1.0 / math.sqrt(in1 * in2)
    k1, k2 = _keys(key, 2)
    weight = jax.random.uniform(k1, (a["out"], in1, in2), minval=-bound, maxval=bound)
    bias = jax.random.uniform(k2, (a["out"],), minval=-bound, maxval=bound) if a["bias"] else None
    return L.Bilinear(weight, bias, a["σ"])


def _build_recurrent(layer: Layer, key: Any, era: str) -> Any:
    """Flux's RNN/LSTM/GRU/GRUv3 as :class:`~._eqx_layers.Recurrence` over its cell (zero ``bias_n``;
    no bias at all for Flux ≥ 0.15's ``bias=false``); a bare cell (``GRUCell``) as that cell alone,
    called as Flux ≥ 0.15's, ``cell(x, h) -> h'`` (LSTM ``(h, c)``)."""
    kind, n_in, hidden = wrapped_kind(layer.kind), int(layer.args["in"]), int(layer.args["out"])
    bias = bool(layer.arg("bias", True))
    cell: Any
    if kind == "LSTM":
        cell = eqx.nn.LSTMCell(n_in, hidden, use_bias=bias, key=key)
    elif kind == "GRU":
        cell = eqx.nn.GRUCell(n_in, hidden, use_bias=bias, key=key)
        if bias:  # (Flux has no b_hn)
            cell = eqx.tree_at(lambda c: c.bias_n, cell, jnp.zeros_like(cell.bias_n))
    else:
        k1, k2, k3 = _keys(key, 3)
        gates = 1 if kind == "RNN" else 3
        wi = eqx.nn.Linear(n_in, gates * hidden, use_bias=bias, key=k1)
        wh = eqx.nn.Linear(hidden, (gates if kind == "RNN" else 2) * hidden, key=k2, use_bias=False)
        if kind == "RNN":
            cell = L.RNNCell(wi.weight, wh.weight, wi.bias, function_of(str(layer.args["σ"])))
        else:
            wc = eqx.nn.Linear(hidden, hidden, use_bias=False, key=k3)
            cell = L.GRUv3Cell(wi.weight, wh.weight, wi.bias, wc.weight)
    if layer.kind in CELLS:
        return cell
    return L.Recurrence(cell, learnt_initial_state(layer), bool(layer.arg("return_state", False)))


def _build_attention(layer: Layer, key: Any, era: str) -> Any:
    """Flux's ``MultiHeadAttention((q_in, k_in, v_in) => (qk_dim, v_dim) => out; nheads, bias)`` as
    ``eqx.nn.MultiheadAttention`` (whose ``qk_size``/``vo_size`` are per head)."""
    a, bias = layer.args, bool(layer.args["bias"])
    heads = int(a["nheads"])
    return eqx.nn.MultiheadAttention(
        heads,
        int(a["q_in"]),
        key_size=int(a["k_in"]),
        value_size=int(a["v_in"]),
        output_size=int(a["out"]),
        qk_size=int(a["qk_dim"]) // heads,
        vo_size=int(a["v_dim"]) // heads,
        use_query_bias=bias,
        use_key_bias=bias,
        use_value_bias=bias,
        use_output_bias=bias,
        dropout_p=float(a["dropout_prob"]),
        inference=True,
        key=key,
    )


def _build_dropout(layer: Layer, key: Any, era: str) -> Any:
    if layer.kind == "AlphaDropout":
        return L.AlphaDropout(float(layer.args["p"]))
    return eqx.nn.Dropout(float(layer.args["p"]), inference=True)


def _build_function(layer: Layer, key: Any, era: str) -> Any:
    function_of(str(layer.args["name"]))  # an unknown name fails here, at build time
    return L.Function(str(layer.args["name"]))


# === reading =======================================================================================


def read_equinox(model: Any, state: Any = None, *, flux: str = DEFAULT_FLUX_ERA) -> Port:
    """An Equinox model (with its ``eqx.nn.State`` if it has BatchNorm) read as its Flux twin.

    Example:
        >>> import jax, equinox as eqx
        >>> conv = eqx.nn.Conv2d(1, 6, 5, key=jax.random.key(0))
        >>> port = read_equinox(eqx.nn.Sequential([conv, eqx.nn.Lambda(jax.nn.relu)]))
        >>> port.children[0].layer.args["kernel"], port.children[0].layer.args["σ"]
        ((5, 5), 'relu')
    """
    return _Reader(state, flux).read(model, ())


class _Reader:
    def __init__(self, state: Any, era: str) -> None:
        self.state = state
        self.era = era

    def read(self, m: Any, path: TreePath) -> Port:
        """``m`` as its Flux layer, by the reader registered for its class (the nearest in its MRO,
        see ``_READERS``); then tuples/lists (a Chain) and plain callables (functions)."""
        reader = class_reader(_BY_CLASS, m)
        if reader is not None:
            return reader(self, m, path)
        if isinstance(m, (tuple, list)):
            return self.chain(list(m), path)
        if isinstance(m, eqx.Module):
            raise UnsupportedError(
                f"no Flux layer for {type(m).__module__}.{type(m).__qualname__} (see docs/porting.md)",
                path=path,
            )
        if callable(m) and not dataclasses.is_dataclass(m):
            return self.function(m, path)
        raise UnsupportedError(f"no Flux layer for {type(m).__name__}", path=path)

    # --- one reader per module class (registered in _READERS) ----------------------------------------
    def sequential(self, m: Any, path: TreePath) -> Port:
        return self.chain(list(m.layers), (*path, "layers"))

    def named_chain(self, m: Any, path: TreePath) -> Port:
        ports = tuple(self.read(c, (*path, "layers", n)) for c, n in zip(m.layers, m.names))
        return Port(Layer("Chain", {}, tuple(p.layer for p in ports), m.names), children=ports)

    def connected(self, m: Any, path: TreePath) -> Port:
        """``Parallel``, ``PairwiseFusion`` or ``Maxout``: the layers, and the connection if any."""
        kind = type(m).__name__
        ports = tuple(self.read(c, (*path, "layers", i + 1)) for i, c in enumerate(m.layers))
        args = {} if isinstance(m, L.Maxout) else {"connection": m.connection}
        names = getattr(m, "names", None)
        return Port(Layer(kind, args, tuple(p.layer for p in ports), names), children=ports)

    def skip(self, m: Any, path: TreePath) -> Port:
        inner = self.read(m.layers, (*path, "layers"))
        return Port(Layer("SkipConnection", {"connection": m.connection}, (inner.layer,)), children=(inner,))

    def activated(self, m: Any, path: TreePath) -> Port:
        port = self.read(m.layer, (*path, "layer"))
        port.layer = dataclasses.replace(port.layer, args={**port.layer.args, "σ": m.activation})
        return port

    def function_entry(self, m: Any, path: TreePath) -> Port:
        return Port(Layer("function", {"name": m.name}))

    def lambda_(self, m: Any, path: TreePath) -> Port:
        return self.function(m.fn, path)

    def identity(self, m: Any, path: TreePath) -> Port:
        return Port(Layer("function", {"name": "identity"}))

    def crosscor(self, m: Any, path: TreePath) -> Port:
        return self.conv(m.conv, "CrossCor", path)

    def conv_module(self, m: Any, path: TreePath) -> Port:
        return self.conv(m, "Conv", path)

    def adaptive(self, m: Any, path: TreePath) -> Port:
        kind = "AdaptiveMaxPool" if m.op == "max" else "AdaptiveMeanPool"
        return Port(with_defaults(Layer(kind, {"out": rev(m.out)})))

    def global_pool(self, m: Any, path: TreePath) -> Port:
        return Port(Layer("GlobalMaxPool" if m.op == "max" else "GlobalMeanPool"))

    def flatten(self, m: Any, path: TreePath) -> Port:
        return Port(Layer("flatten"))

    def embedding(self, m: Any, path: TreePath) -> Port:
        n, d = m.weight.shape
        return Port(
            Layer("Embedding", {"in": int(n), "out": int(d)}), {"weight": (m.weight, Transpose((1, 0)))}
        )

    def recurrence(self, m: Any, path: TreePath) -> Port:
        port = self.recurrent_cell(m.cell, (*path, "cell"))
        return carry_initial_state(returning_state(port, m.return_state), m.state0)

    def bare_cell(self, m: Any, path: TreePath) -> Port:
        """A cell alone (one step, ``cell(x, h)``): Flux ≥ 0.15's cell, not the layer scanning it."""
        return bare_cell(self.recurrent_cell(m, path))

    def dropout(self, m: Any, path: TreePath) -> Port:
        return Port(Layer("AlphaDropout" if isinstance(m, L.AlphaDropout) else "Dropout", {"p": float(m.p)}))

    def bilinear(self, m: Any, path: TreePath) -> Port:
        out, in1, in2 = m.weight.shape
        layer = Layer("Bilinear", {"in": (int(in1), int(in2)), "out": int(out), "σ": m.activation,
                                   "bias": m.bias is not None})  # fmt: skip
        arrays: dict[str, tuple[Any, Perm]] = {"weight": (m.weight, SAME)}
        if m.bias is not None:
            arrays["bias"] = (m.bias, SAME)
        return Port(layer, arrays)

    # --- containers --------------------------------------------------------------------------------
    def chain(self, items: list[Any], path: TreePath) -> Port:
        return chain_port(items, path, self.read, lambda item: isinstance(item, L.Function))

    def mlp(self, mlp: Any, path: TreePath) -> Port:
        if getattr(mlp, "scan", False):
            raise UnsupportedError(
                "eqx.nn.MLP(scan=True) stacks its hidden layers; use scan=False", path=path
            )
        ports = []
        last = len(mlp.layers) - 1
        for i, lin in enumerate(mlp.layers):
            fn = mlp.final_activation if i == last else mlp.activation
            port = self.linear(lin, (*path, "layers", i + 1))
            name = name_of(fn)
            args = {**port.layer.args, "σ": name if name is not None else "<unknown>", "fn": fn}
            port.layer = dataclasses.replace(port.layer, args=args)
            ports.append(port)
        return Port(Layer("Chain", {}, tuple(p.layer for p in ports)), children=tuple(ports))

    def function(self, fn: Any, path: TreePath) -> Port:
        if fn is jnp.ravel:  # eqx.nn.Lambda(jnp.ravel) on one sample is Flux's flatten (§1.4)
            return Port(Layer("flatten"))
        return Port(Layer("function", {"name": name_of(fn), "fn": fn}))

    # --- layers ------------------------------------------------------------------------------------
    def linear(self, m: Any, path: TreePath) -> Port:
        if len(m.weight.shape) != 2:
            raise UnsupportedError(
                f"Linear weight of shape {tuple(m.weight.shape)} is not a matrix", path=path
            )
        if getattr(m, "out_features", None) == "scalar" or getattr(m, "in_features", None) == "scalar":
            raise UnsupportedError(
                'Linear(..., "scalar") has a 0-d array; Flux Dense needs vectors', path=path
            )
        out, inp = m.weight.shape
        arrays: dict[str, tuple[Any, Perm]] = {"weight": (m.weight, SAME)}
        if m.use_bias:
            arrays["bias"] = (m.bias, SAME)
        layer = Layer("Dense", {"in": int(inp), "out": int(out), "bias": bool(m.use_bias), "σ": "identity"})
        return Port(layer, arrays)

    def scale(self, m: Any, path: TreePath) -> Port:
        """Flux's ``scale``/``bias`` are the module's arrays reversed (Julia's leading dims)."""
        args = {"size": rev(m.weight.shape), "bias": m.bias is not None, "σ": "identity"}
        arrays: dict[str, tuple[Any, Perm]] = {"scale": (m.weight, REV)}
        if m.bias is not None:
            arrays["bias"] = (m.bias, REV)
        return Port(Layer("Scale", args), arrays)

    def attention(self, m: Any, path: TreePath) -> Port:
        """Same matrices (Flux's heads own contiguous row blocks, as Equinox's), any sizes; one bias flag."""
        projections = {
            "q_proj": m.query_proj,
            "k_proj": m.key_proj,
            "v_proj": m.value_proj,
            "out_proj": m.output_proj,
        }
        flags = {p.use_bias for p in projections.values()}
        if len(flags) != 1:
            raise UnsupportedError(
                "Flux's MultiHeadAttention has one bias flag for all four projections", path=path
            )
        arrays: dict[str, tuple[Any, Perm]] = {}
        for name, proj in projections.items():
            arrays[f"{name}.weight"] = (proj.weight, SAME)
            if proj.use_bias:
                arrays[f"{name}.bias"] = (proj.bias, SAME)
        heads = int(m.num_heads)
        args: dict[str, Any] = {
            "q_in": int(m.query_size), "k_in": int(m.key_size), "v_in": int(m.value_size),
            "qk_dim": int(m.qk_size) * heads, "v_dim": int(m.vo_size) * heads, "out": int(m.output_size),
            "nheads": heads, "bias": flags.pop(), "dropout_prob": float(m.dropout.p),
        }  # fmt: skip
        return Port(with_defaults(Layer("MultiHeadAttention", args)), arrays)

    def recurrent_cell(self, m: Any, path: TreePath) -> Port:
        """A recurrent cell as Flux's layer: same matrices (Flux's gate order is Equinox's), no state0.

        ``eqx.nn.GRUCell.bias_n`` (inside ``r``) has no Flux counterpart: it must be zero to port, and a
        restore sets it to zero. A cell without bias (``use_bias=False``, or ``bias`` None) is Flux
        ≥ 0.15's ``bias=false``.
        """
        hidden, n_in = int(m.weight_hh.shape[-1]), int(m.weight_ih.shape[-1])
        arrays: dict[str, tuple[Any, Perm]] = {"Wi": (m.weight_ih, SAME), "Wh": (m.weight_hh, SAME)}
        args: dict[str, Any] = {"in": n_in, "out": hidden}
        if m.bias is not None:
            arrays["b"] = (m.bias, SAME)
        else:
            args["bias"] = False
        fixed: list[tuple[Any, Any]] = []
        if isinstance(m, eqx.nn.LSTMCell):
            kind = "LSTM"
        elif isinstance(m, eqx.nn.GRUCell):
            kind = "GRU"
            if m.bias_n is None:
                pass  # (use_bias=False: no b_hn either)
            elif not _is_restoring(m.bias_n) and bool(jnp.any(m.bias_n != 0)):
                raise UnsupportedError(
                    "GRUCell.bias_n is not zero: Flux's GRU has no bias inside r "
                    "(docs/porting.md §Recurrent layers)",
                    path=(*path, "bias_n"),
                )
            if m.bias_n is not None:
                fixed.append((m.bias_n, np.zeros(hidden, np.float32)))
        elif isinstance(m, L.GRUv3Cell):
            kind = "GRUv3"
            arrays["Wh_h̃"] = (m.weight_hh_candidate, SAME)
        else:
            kind = "RNN"
            args["σ"] = name_of(m.activation)
        return Port(with_defaults(Layer(kind, args)), arrays, fixed=fixed)

    def conv(self, m: Any, kind: str, path: TreePath) -> Port:
        transpose = isinstance(m, eqx.nn.ConvTranspose)
        if transpose:
            kind = "ConvTranspose"
        if getattr(m, "padding_mode", "ZEROS") != "ZEROS":
            raise UnsupportedError(f"padding_mode={m.padding_mode!r}: Flux pads with zeros", path=path)
        n = int(m.num_spatial_dims)
        args: dict[str, Any] = {
            "kernel": rev(m.kernel_size),
            "in": int(m.in_channels),
            "out": int(m.out_channels),
            "stride": rev(m.stride),
            "pad": julia_pad(_same(m, transpose, path), path),
            "dilation": rev(m.dilation),
            "groups": int(m.groups),
            "bias": bool(m.use_bias),
            "σ": "identity",
        }
        if kind == "CrossCor" and m.groups != 1:
            raise UnsupportedError("Flux CrossCor has no groups", path=path)
        if transpose:
            args["outpad"] = rev(m.output_padding)
        arrays: dict[str, tuple[Any, Perm]] = {"weight": (m.weight, conv_weight_perm(kind, args))}
        if m.use_bias:
            arrays["bias"] = (m.bias, Reshape((args["out"],), (args["out"],) + (1,) * n))
        return Port(with_defaults(Layer(kind, args)), arrays)

    def pool(self, m: Any, path: TreePath) -> Port:
        nn = eqx.nn
        if isinstance(m, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)):
            kind = "MaxPool"
        elif isinstance(m, (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)):
            kind = "MeanPool"
        else:
            raise UnsupportedError(f"no Flux pool for {type(m).__name__}", path=path)
        if m.use_ceil:
            raise UnsupportedError("use_ceil=True: Flux pools floor the output size", path=path)
        args = {"k": rev(m.kernel_size), "stride": rev(m.stride), "pad": julia_pad(m.padding, path)}
        return Port(Layer(kind, args))

    def batchnorm(self, m: Any, path: TreePath) -> Port:
        if self.state is None:
            raise UnsupportedError(
                "eqx.nn.BatchNorm keeps its running statistics in an eqx.nn.State: pass (model, state)",
                path=path,
            )
        args = {
            "channels": int(m.input_size),
            "ϵ": float(m.eps),
            "momentum": 1.0 - float(m.momentum),  # Equinox keeps 1 − m (docs/porting.md §BatchNorm momentum)
            "affine": bool(m.channelwise_affine),
            "track_stats": True,
        }
        port = Port(with_defaults(Layer("BatchNorm", args)))
        if m.channelwise_affine:
            port.arrays.update({"γ": (m.weight, SAME), "β": (m.bias, SAME)})
        # The StateIndex initial values are model leaves too; a restore keeps them as they are
        # (the restored statistics are in the returned state).
        for index in (m.ema_state_index, m.ema_first_time_index, m.batch_state_index, m.batch_counter):
            if index is not None:
                port.fixed += [(leaf, KEEP) for leaf in _leaves(index.init)]
        if m.mode == "ema":
            mean, var = self.state.get(m.ema_state_index)
            port.fixed.append((self.state.get(m.ema_first_time_index), np.asarray(False)))
        else:
            mean, var = self.state.get(m.batch_state_index)
            counter = self.state.get(m.batch_counter)
            port.fixed.append((counter, np.asarray(0)))
            mean, var = _debias(mean, var, counter, float(m.momentum))
        port.arrays.update({"μ": (mean, SAME), "σ²": (var, SAME)})
        return port

    def groupnorm(self, m: Any, path: TreePath) -> Port:
        instance = isinstance(m, L.InstanceNorm)
        norm = m.norm if instance else m
        if norm.channels is None:
            raise UnsupportedError("GroupNorm(channels=None): Flux needs the channel count", path=path)
        args = {
            "channels": int(norm.channels),
            "ϵ": float(norm.eps),
            "affine": bool(norm.channelwise_affine),
            "track_stats": False,
        }
        if not instance:
            args["groups"] = int(norm.groups)
        port = Port(with_defaults(Layer("InstanceNorm" if instance else "GroupNorm", args)))
        if norm.channelwise_affine:
            port.arrays.update({"γ": (norm.weight, SAME), "β": (norm.bias, SAME)})
        return port

    def layernorm(self, m: Any, path: TreePath) -> Port:
        affine = bool(m.use_weight)
        if affine != bool(m.use_bias):
            raise UnsupportedError("Flux LayerNorm has both scale and bias or neither", path=path)
        if self.era == "0.14":
            raise UnsupportedError(layernorm_0_14_message(), path=path)
        args = {"size": rev(m.shape), "ϵ": math.sqrt(float(m.eps)), "affine": affine}
        port = Port(with_defaults(Layer("LayerNorm", args)))
        if affine:
            port.arrays.update({"scale": (m.weight, REV), "bias": (m.bias, REV)})
        return port

    def layernorm_std_eps(self, m: Any, path: TreePath) -> Port:
        # A restore (LeafRef arrays) reads arrays only, whatever the era; a written state must be 0.14's.
        if self.era != "0.14" and not isinstance(m.weight, LeafRef):
            raise UnsupportedError(layernorm_0_15_message(), path=path)
        if (m.weight is None) != (m.bias is None):
            raise UnsupportedError("Flux LayerNorm has both scale and bias or neither", path=path)
        affine = m.weight is not None
        port = Port(
            with_defaults(Layer("LayerNorm", {"size": rev(m.shape), "ϵ": float(m.eps), "affine": affine}))
        )
        if affine:
            port.arrays.update({"scale": (m.weight, REV), "bias": (m.bias, REV)})
        return port


def _is_restoring(leaf: Any) -> bool:
    return isinstance(leaf, LeafRef)


def _leaves(tree: Any) -> list[Any]:
    return jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, LeafRef))


def _debias(mean: Any, var: Any, counter: Any, momentum: float) -> tuple[Any, Any]:
    """Equinox ``mode="batch"`` keeps zero-debiased running stats: μ = hidden / (1 − momentum^counter)."""
    if isinstance(mean, LeafRef):
        return mean, var  # restoring: counter is reset to 0, so the stats are stored as they are
    n = int(np.asarray(counter))
    if n == 0:
        return mean, var
    scale = 1.0 - momentum**n
    return np.asarray(mean) / scale, np.asarray(var) / scale


def equinox_loaded() -> bool:
    return "equinox" in sys.modules


# === the registry entries: one builder and one reader per kind ======================================


def _build_parallel(layer: Layer, key: Any, era: str) -> Any:
    return L.Parallel(tuple(_children(layer, key, era)), layer.arg("connection", "+"), layer.names)


def _build_skip(layer: Layer, key: Any, era: str) -> Any:
    return L.SkipConnection(_children(layer, key, era)[0], layer.arg("connection", "+"))


def _build_fusion(layer: Layer, key: Any, era: str) -> Any:
    return L.PairwiseFusion(tuple(_children(layer, key, era)), layer.arg("connection", "+"))


def _build_maxout(layer: Layer, key: Any, era: str) -> Any:
    return L.Maxout(tuple(_children(layer, key, era)))


def _build_adaptive(layer: Layer, key: Any, era: str) -> Any:
    return L.AdaptivePool("max" if layer.kind == "AdaptiveMaxPool" else "mean", rev(layer.args["out"]))


def _build_global(layer: Layer, key: Any, era: str) -> Any:
    return L.GlobalPool("max" if layer.kind == "GlobalMaxPool" else "mean")


def _build_flatten(layer: Layer, key: Any, era: str) -> Any:
    return L.Flatten()


_BUILDERS: list[tuple[tuple[str, ...], Callable[..., Any]]] = [
    (("Chain",), _build_chain),
    (("Parallel",), _build_parallel),
    (("SkipConnection",), _build_skip),
    (("PairwiseFusion",), _build_fusion),
    (("Maxout",), _build_maxout),
    (("Dense",), _build_dense),
    (("Bilinear",), _build_bilinear),
    (("Scale",), _build_scale),
    (("Embedding",), _build_embedding),
    (("Conv", "DepthwiseConv", "CrossCor", "ConvTranspose"), _build_conv),
    (("MaxPool", "MeanPool"), _build_pool),
    (("AdaptiveMaxPool", "AdaptiveMeanPool"), _build_adaptive),
    (("GlobalMaxPool", "GlobalMeanPool"), _build_global),
    (("flatten",), _build_flatten),
    (("function",), _build_function),
    (("BatchNorm",), _build_norm),
    (("GroupNorm", "InstanceNorm"), _build_norm),
    (("LayerNorm",), _build_layernorm),
    (("Dropout", "AlphaDropout"), _build_dropout),
    (("MultiHeadAttention",), _build_attention),
    (("RNN", "LSTM", "GRU", "GRUv3", *CELLS), _build_recurrent),
]
_nn = eqx.nn
_READERS: ClassReaders = [
    (("Chain",), (_nn.Sequential, L.SequenceChain), _Reader.sequential),
    ((), (L.NamedChain,), _Reader.named_chain),
    ((), (_nn.MLP,), _Reader.mlp),
    (("Parallel", "PairwiseFusion", "Maxout"), (L.Parallel, L.PairwiseFusion, L.Maxout), _Reader.connected),
    (("SkipConnection",), (L.SkipConnection,), _Reader.skip),
    ((), (L.Activated, L.StatefulActivated), _Reader.activated),
    (("function",), (L.Function,), _Reader.function_entry),
    ((), (_nn.Lambda,), _Reader.lambda_),
    ((), (_nn.Identity,), _Reader.identity),
    (("Dense",), (_nn.Linear,), _Reader.linear),
    (("Bilinear",), (L.Bilinear,), _Reader.bilinear),
    (("Scale",), (L.Scale,), _Reader.scale),
    (("Embedding",), (_nn.Embedding,), _Reader.embedding),
    (("Conv", "DepthwiseConv", "ConvTranspose"), (_nn.Conv, _nn.ConvTranspose), _Reader.conv_module),
    (("CrossCor",), (L.CrossCor,), _Reader.crosscor),
    (("MaxPool", "MeanPool"), (_nn.Pool,), _Reader.pool),
    (("AdaptiveMaxPool", "AdaptiveMeanPool"), (L.AdaptivePool,), _Reader.adaptive),
    (("GlobalMaxPool", "GlobalMeanPool"), (L.GlobalPool,), _Reader.global_pool),
    (("flatten",), (L.Flatten,), _Reader.flatten),
    (("BatchNorm",), (_nn.BatchNorm,), _Reader.batchnorm),
    (("GroupNorm", "InstanceNorm"), (_nn.GroupNorm, L.InstanceNorm), _Reader.groupnorm),
    (("LayerNorm",), (_nn.LayerNorm,), _Reader.layernorm),
    ((), (L.LayerNormStdEps,), _Reader.layernorm_std_eps),
    (("Dropout", "AlphaDropout"), (_nn.Dropout, L.AlphaDropout), _Reader.dropout),
    (("MultiHeadAttention",), (_nn.MultiheadAttention,), _Reader.attention),
    (("RNN", "LSTM", "GRU", "GRUv3"), (L.Recurrence,), _Reader.recurrence),
    (tuple(CELLS), (_nn.LSTMCell, _nn.GRUCell, L.RNNCell, L.GRUv3Cell), _Reader.bare_cell),
]
_BY_CLASS = register_target("equinox", _BUILDERS, _READERS)
